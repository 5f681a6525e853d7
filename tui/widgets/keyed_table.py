"""A DataTable that is synced from a dict of rows by key, changing only what changed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.actions import SkipAction
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
    position survive every refresh. Every such table can be filtered (`/`: the rows whose shown
    text holds the filter, in any case; `esc` clears it) and sorted (`o`: the next column up,
    then down, then the view's own order); both are named in the screen's title.
    """

    BINDINGS = [
        # in the help screen (?), not the footer: the footer keeps q Quit in 80 columns
        Binding("slash", "filter", "Filter", show=False,
                tooltip="filter the rows: any case, over what they show (esc clears)"),
        Binding("o", "cycle_sort", "Sort", show=False,
                tooltip="sort by a column: each column up, then down, then as it was"),
        Binding("escape", "clear_filter", "Clear filter", show=False,
                tooltip="clear the table's filter (without one: back)"),
    ]

    def __init__(self, columns: Sequence[tuple[str, str] | tuple[str, str, int]], **kw: Any) -> None:
        kw.setdefault("cursor_type", "row")
        kw.setdefault("zebra_stripes", True)
        super().__init__(**kw)
        #: the filter (any case, over each row's shown text) and the sort (column index, downward)
        self.filter_text = ""
        self.sort_by: tuple[int, bool] | None = None
        self._all_rows: dict[str, Sequence[Any]] = {}
        self._all_heights: dict[str, int] = {}
        #: the keys the filter and sort let through, in their order (for the title's count)
        self._view_keys: list[str] = []
        #: the row object each key was last given (a caller that keeps unchanged rows' objects
        #: lets sync skip them without comparing a cell)
        self._given: dict[str, Any] = {}
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
        self._given.clear()
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

    # -- filter and sort -----------------------------------------------------------------------
    def describe(self) -> str:
        """The filter and sort in words, for the title ('' when neither is set)."""
        parts = []
        if self.filter_text:
            parts.append(f"filter {self.filter_text!r} ({len(self._view_keys)} of {len(self._all_rows)})")
        if self.sort_by is not None and self.sort_by[0] < len(self._spec):
            label = self._spec[self.sort_by[0]][1]
            label = label.plain if isinstance(label, Text) else re.sub(r"\[[^\]]*\]", "", str(label))
            parts.append(f"sorted by {label} {'↓' if self.sort_by[1] else '↑'}")
        return " · ".join(parts)

    def set_filter(self, text: str) -> None:
        """Show only the rows whose shown text holds `text` (any case); '' shows every row."""
        self.filter_text = text
        self._reapply()

    def action_filter(self) -> None:
        from fleetdeck.tui.widgets.filter_prompt import FilterPrompt

        self.app.push_screen(FilterPrompt(self))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # without a filter, esc is not this table's: the screen's esc (back, close) shows in
        # the footer and runs, as before
        if action == "clear_filter" and not self.filter_text:
            return False
        return super().check_action(action, parameters)

    def action_clear_filter(self) -> None:
        if not self.filter_text:
            raise SkipAction()
        self.set_filter("")

    def action_cycle_sort(self) -> None:
        n = len(self._spec)
        if self.sort_by is None:
            self.sort_by = (0, False)
        elif not self.sort_by[1]:
            self.sort_by = (self.sort_by[0], True)
        elif self.sort_by[0] + 1 < n:
            self.sort_by = (self.sort_by[0] + 1, False)
        else:
            self.sort_by = None
        self._reapply()

    def _reapply(self) -> None:
        self._sync(self._view(self._all_rows), self._all_heights)
        self._show_in_title()

    def _show_in_title(self) -> None:
        try:
            screen = self.screen
        except Exception:
            return
        desc = self.describe()
        screen.title = f"{self.app.title} · {desc}" if desc else None

    def _view(self, rows: Mapping[str, Sequence[Any]]) -> dict[str, Sequence[Any]]:
        keys = list(rows)
        if self.filter_text:
            needle = self.filter_text.casefold()
            keys = [k for k in keys if needle in " ".join(_plain(c) for c in rows[k]).casefold()]
        if self.sort_by is not None:
            i, down = self.sort_by
            keys.sort(key=lambda k: _sort_key(rows[k][i] if i < len(rows[k]) else ""), reverse=down)
        self._view_keys = keys
        return {k: rows[k] for k in keys}

    def sync(self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None) -> int:
        """Make the table show `rows` (key -> cells, in order), through the filter and the sort
        the operator chose; returns how many cells changed."""
        self._all_rows = dict(rows)
        self._all_heights = dict(heights or {})
        if not self.filter_text and self.sort_by is None:
            self._view_keys = list(rows)
            return self._sync(rows, heights)
        changed = self._sync(self._view(rows), heights)
        self._show_in_title()
        return changed

    def _sync(self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None) -> int:
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
            self._given.pop(key, None)
            changed += 1
        col_keys = [ColumnKey(spec[0]) for spec in self._spec]
        touched = False
        for key, given in rows.items():
            h = heights.get(key, 1)
            if self._given.get(key) is given and key in self._cells and self._heights.get(key) == h:
                continue   # the caller handed the very row it handed last time: nothing changed
            self._given[key] = given
            cells = tuple(_one_line_each(c) for c in given)
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
                    if a is not b and a != b:
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


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "%": 1}
_NUM = re.compile(r"^\s*([-+]?[0-9]+(?:\.[0-9]+)?)\s*([BKMGTP%]?)\b")


def _sort_key(cell: Any) -> tuple[int, float, str]:
    """Numbers (sizes with their unit, percentages) before text, each in its natural order."""
    text = _plain(cell).strip()
    m = _NUM.match(text)
    if m:
        return (0, float(m.group(1)) * _UNITS.get(m.group(2), 1), text.casefold())
    return (1, 0.0, text.casefold())
