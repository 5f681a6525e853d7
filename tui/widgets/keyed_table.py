"""A DataTable that is synced from a dict of rows by key, changing only what changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.binding import Binding
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellKey, ColumnKey, RowKey


class NavTable(DataTable):
    """A DataTable with the keys of k9s and lazygit: j / k, Home / End to the first / last row
    (DataTable's own Home / End scroll sideways), PgUp / PgDn."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, tooltip="next row"),
        Binding("k", "cursor_up", "Up", show=False, tooltip="previous row"),
        Binding("home", "scroll_top", "First", show=False, tooltip="first row"),
        Binding("end", "scroll_bottom", "Last", show=False, tooltip="last row"),
    ]


class KeyedTable(NavTable):
    """Rows keyed by a stable id (host, run, schedule); `sync()` updates cell by cell.

    Rows are added or removed only when the set of keys changes, so the cursor and the scroll
    position survive every refresh.
    """

    def __init__(self, columns: Sequence[tuple[str, str] | tuple[str, str, int]], **kw: Any) -> None:
        kw.setdefault("cursor_type", "row")
        kw.setdefault("zebra_stripes", True)
        super().__init__(**kw)
        self._spec = list(columns)
        self._cells: dict[str, tuple] = {}
        self._heights: dict[str, int] = {}
        self._restore_key: str | None = None
        #: rendered cells keyed by the cell object itself (see `_render_cell`)
        self._content_cache: LRUCache[tuple, tuple[Any, Any]] = LRUCache(4096)
        #: every line of a row, rendered at once (see `_render_line_in_row`)
        self._row_lines_cache: LRUCache[tuple, list] = LRUCache(512)

    def on_mount(self) -> None:
        self._add_columns()

    def set_columns(self, columns: Sequence[tuple[str, str] | tuple[str, str, int]]) -> bool:
        """Show `columns` (key, label[, width]) from now on, without replacing the widget.

        Same keys: widths and labels change in place. Other keys (a narrow terminal drops
        minor columns): the columns are re-added and every row comes back with the next
        `sync()`, the cursor on the same key. Returns True when the caller must `sync()` again.
        Replacing the widget instead raced with itself under a storm of resizes (two tables
        with one id for a moment: `DuplicateIds`).
        """
        new = list(columns)
        if new == self._spec:
            return False
        if [c[0] for c in new] == [c[0] for c in self._spec]:
            for spec in new:
                col = self.columns[ColumnKey(spec[0])]
                col.label = Text.from_markup(spec[1]) if isinstance(spec[1], str) else spec[1]
                if len(spec) > 2 and spec[2] is not None:
                    col.width, col.auto_width = spec[2], False
                else:
                    col.auto_width = True
            self._spec = new
            self._require_update_dimensions = True
            self._update_count += 1
            self.refresh()
            return False
        self._restore_key = self.current_key
        self.clear(columns=True)
        self._spec = new
        self._cells.clear()
        self._heights.clear()
        self._add_columns()
        return True

    def _add_columns(self) -> None:
        for spec in self._spec:
            key, label = spec[0], spec[1]
            width = spec[2] if len(spec) > 2 else None
            self.add_column(label, key=key, width=width)

    @property
    def keys(self) -> list[str]:
        """Row keys in display order."""
        return [r.key.value for r in self.ordered_rows]

    @property
    def current_key(self) -> str | None:
        """Key of the row under the cursor, or None for an empty table."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def sync(self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None) -> int:
        """Make the table show `rows` (key -> cells, in order); returns how many cells changed.

        Cells equal to what is shown are left alone; rows whose key vanished are removed and new
        keys appended, then moved into the given order only if the order itself changed.
        """
        heights = heights or {}
        changed = 0
        for key in [k for k in self._cells if k not in rows]:
            self.remove_row(key)
            del self._cells[key]
            self._heights.pop(key, None)
            changed += 1
        col_keys = [ColumnKey(spec[0]) for spec in self._spec]
        touched = False
        for key, cells in rows.items():
            cells = tuple(_one_line_each(c) for c in cells)
            h = heights.get(key, 1)
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key, height=h)
                self._heights[key] = h
                changed += len(cells)
            else:
                if self._heights.get(key) != h:
                    self._set_height(key, h)
                row = self._data[RowKey(key)]
                for i, (a, b) in enumerate(zip(old, cells, strict=True)):
                    if a != b:
                        # what update_cell does, minus its refresh() per cell: one refresh below
                        row[col_keys[i]] = b
                        changed += 1
                        touched = True
                        column = self.columns[col_keys[i]]
                        if column.auto_width and isinstance(b, Text) and b.cell_len > column.content_width:
                            # a wider value (159/159 after 9/159): let the column grow to show it
                            self._updated_cells.add(CellKey(RowKey(key), col_keys[i]))
                            self._require_update_dimensions = True
            self._cells[key] = cells
        if touched:
            self._update_count += 1
            self.refresh()
        wanted = list(rows)
        if self._restore_key is not None:
            # the rows came back after a change of columns: the cursor goes where it was
            key, self._restore_key = self._restore_key, None
            if key in rows:
                self.move_cursor(row=wanted.index(key), animate=False)
        if self.keys != wanted:
            order = {k: i for i, k in enumerate(wanted)}
            current = self.current_key
            # DataTable.sort() hands the key function cell values only; order by key instead
            self._row_locations = TwoWayDict({RowKey(k): i for i, k in enumerate(wanted)})
            self._update_count += 1
            self.refresh()
            # sorting moves rows, not the cursor: keep it on the same row
            if current in order:
                self.move_cursor(row=self.get_row_index(current), animate=False)
        return changed

    def _render_cell(self, row_index: int, column_index: int, base_style: Any, width: int,
                     cursor: bool = False, hover: bool = False) -> Any:
        # DataTable keys its cell cache by a table-wide update count, so after a poll that
        # changed one cell it renders every visible cell again. `sync()` keeps the very
        # object of a cell that did not change, so that object is a sound cache key: only
        # changed cells are rendered (measured in benchmarks/tui.py).
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        row = self._data.get(row_key)
        if row is None or column_key not in row:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = row[column_key]
        key = (row_key, column_key, id(value), row_index, base_style, width, cursor, hover,
               self._show_hover_cursor, self._pseudo_class_state, self.rows[row_key].height,
               self.cursor_type, self.show_cursor)
        hit = self._content_cache.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        self._content_cache[key] = (value, lines)
        return lines

    def _render_line_in_row(self, row_key: Any, line_no: int, base_style: Any, cursor_location: Any,
                            hover_location: Any) -> tuple[list, list]:
        # DataTable renders a row one line at a time and works out the row's styles again for
        # each line; a host with 8 GPUs is an 8-line row. Here the styles are worked out once
        # per row and every line of it is built in one go (the same segments: the snapshot
        # tests compare them). Header, row labels and fixed columns keep DataTable's path.
        if row_key is self._header_row_key or self.fixed_columns or (
                self._labelled_row_exists and self.show_row_labels):
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        key = (row_key, base_style, cursor_location, hover_location, self.cursor_type, self.show_cursor,
               self._show_hover_cursor, self._update_count, self._pseudo_class_state, self.size.width)
        lines = self._row_lines_cache.get(key)
        if lines is None:
            lines = self._render_row_lines(row_key, base_style, cursor_location, hover_location)
            self._row_lines_cache[key] = lines
        return lines[line_no] if line_no < len(lines) else lines[-1]

    def _render_row_lines(self, row_key: Any, base_style: Any, cursor_location: Any,
                          hover_location: Any) -> list[tuple[list, list]]:
        cursor_type = self.cursor_type
        should_highlight = self._should_highlight
        row_index = self._row_locations.get(row_key)
        if row_index is None:
            row_index = -1
        row_style = self._get_row_style(row_index, base_style)
        cells = []
        widths = 0
        for column_index, column in enumerate(self.ordered_columns):
            location = Coordinate(row_index, column_index)
            width = column.get_render_width(self)
            widths += width
            cells.append(self._render_cell(row_index, column_index, row_style, width,
                                           cursor=should_highlight(cursor_location, location, cursor_type),
                                           hover=should_highlight(hover_location, location, cursor_type)))
        remaining = max(0, self.size.width - widths - self._row_label_column_width)
        if cursor_type == "row":
            extend_style, _ = self._get_styles_to_render_cell(
                row_index == -1, False, False,
                should_highlight(hover_location, Coordinate(row_index or 0, 0), cursor_type),
                row_index == cursor_location.row, self.show_cursor, self._show_hover_cursor, False, False)
            extend_style = row_style + extend_style
        else:
            return [super(KeyedTable, self)._render_line_in_row(row_key, i, base_style, cursor_location,
                                                                hover_location)
                    for i in range(max((len(c) for c in cells), default=1))]
        extend_style += RichStyle.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        fill = [Segment(" " * remaining, extend_style)]
        height = max((len(c) for c in cells), default=1)
        return [([], [c[i] for c in cells] + [fill]) for i in range(height)]

    def _set_height(self, key: str, h: int) -> None:
        # DataTable has no API to change a row's height; its layout caches are keyed by the
        # update count, so bumping that (via a no-op cell write) makes it re-measure.
        self.rows[RowKey(key)].height = h
        self._heights[key] = h
        self._require_update_dimensions = True
        first = self._spec[0][0]
        self.update_cell(key, first, self.get_cell(key, first))


def _one_line_each(cell: Any) -> Any:
    # DataTable wraps long cell text onto the next line, which breaks multi-line rows apart;
    # cut each line with an ellipsis instead (the detail panes carry the full text)
    if isinstance(cell, str):
        cell = Text(cell)
    if isinstance(cell, Text):
        cell.no_wrap = True
        cell.overflow = "ellipsis"
    return cell
