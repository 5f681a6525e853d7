"""A DataTable that is synced from a dict of rows by key, changing only what changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.binding import Binding
from textual.cache import LRUCache
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import CellKey, ColumnKey, RowKey

from fleetdeck.tui.widgets.cell_sort import plain, sort_key
from fleetdeck.tui.widgets.column_sort import ColumnSort
from fleetdeck.tui.widgets.lazy_rows import LazyRows
from fleetdeck.tui.widgets.table_lines import TableLines, one_line_each


class NavTable(DataTable):
    """A DataTable with the keys of k9s and lazygit: j / k, Home / End to the first / last row
    (DataTable's own Home / End scroll sideways), PgUp / PgDn."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, tooltip="next row"),
        Binding("k", "cursor_up", "Up", show=False, tooltip="previous row"),
        Binding("home", "scroll_top", "First", show=False, tooltip="first row"),
        Binding("end", "scroll_bottom", "Last", show=False, tooltip="last row"),
    ]


class KeyedTable(LazyRows, ColumnSort, TableLines, NavTable):
    """Rows keyed by a stable id (host, run, schedule); `sync()` updates cell by cell.

    Rows are added or removed only when the set of keys changes, so the cursor and the scroll
    position survive every refresh. Every such table can be filtered (`/`: the rows whose shown
    text holds the filter, in any case; `esc` clears it) and sorted (`o`: the next column up,
    then down, then the view's own order); both are named in the screen's title. Made with
    `column_sort=True`, shift and a column's letter (underlined in its header) or a click on the
    header sorts by that column at once (`column_sort.py`). The filter and the sort are saved
    per view and table (`tui/settings.py`) when the app keeps settings. `sync_lazy` makes a
    row's cells only when it is drawn (`lazy_rows.py`).
    """

    class ChoiceChanged(Message):
        """The operator changed the table's filter or sort (the app saves it)."""

        def __init__(self, table: KeyedTable) -> None:
            super().__init__()
            self.table = table

    BINDINGS = [
        # in the help screen (?), not the footer: the footer keeps q Quit in 80 columns
        Binding(
            "slash",
            "filter",
            "Filter",
            show=False,
            tooltip="filter the rows: any case, over what they show (esc clears)",
        ),
        Binding(
            "o",
            "cycle_sort",
            "Sort",
            show=False,
            tooltip="sort by a column: each column up, then down, then as it was",
        ),
        Binding(
            "escape",
            "clear_filter",
            "Clear filter",
            show=False,
            tooltip="clear the table's filter (without one: back)",
        ),
    ]

    def __init__(
        self,
        columns: Sequence[tuple[str, str] | tuple[str, str, int]],
        *,
        column_sort: bool = False,
        **kw: Any,
    ) -> None:
        self.column_sort = column_sort
        kw.setdefault("cursor_type", "row")
        kw.setdefault("zebra_stripes", True)
        #: row keys in display order (DataTable keeps only key -> index)
        self._order: list[str] = []
        #: bumped whenever rows come, go, move or change height: the line offsets and the
        #: ordered rows are cached by it, not by DataTable's update count (which every changed
        #: cell bumps, and which made each poll walk every row of a 10,000-row table again)
        self._layout_version = 0
        self._offsets: tuple[tuple, list] = ((), [])
        self._ordered: tuple[tuple, list] = ((), [])
        #: `sync_lazy`: what makes a row's cells, the keys, heights; the rows filled since
        self._lazy: tuple[list[str], Callable[[str], Sequence[Any]], dict[str, int]] | None = None
        self._make: Callable[[str], Sequence[Any]] | None = None
        self._fresh: set[str] = set()
        #: how many rows' cells `make` computed (what a lazy table saves is rows not computed)
        #: how many cells sync or a lazy row's filling replaced, in all
        self.cells_changed = 0
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
        #: how many rows are taller than one line
        self._tall = 0
        self._restore_key: str | None = None
        #: rendered cells keyed by the cell object itself (see `_render_cell`)
        self._content_cache: LRUCache[tuple, tuple[Any, Any]] = LRUCache(4096)
        #: every line of a row, rendered at once (see `_render_line_in_row`)
        self._row_lines_cache: LRUCache[tuple, list] = LRUCache(512)

    def on_mount(self) -> None:
        self._restore_choice()
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
        if self.sort_by is not None:
            # the sort follows its column's key, not its place (a narrow terminal drops some)
            old = self._spec[self.sort_by[0]][0] if self.sort_by[0] < len(self._spec) else None
            keys = [c[0] for c in new]
            self.sort_by = (keys.index(old), self.sort_by[1]) if old in keys else None
        if [c[0] for c in new] == [c[0] for c in self._spec]:
            self._spec = new
            for spec, label in zip(new, self.column_labels(), strict=True):
                col = self.columns[ColumnKey(spec[0])]
                col.label = Text.from_markup(label) if isinstance(label, str) else label
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
        self._add_columns()
        return True

    def _add_columns(self) -> None:
        for spec, label in zip(self._spec, self.column_labels(), strict=True):
            key = spec[0]
            width = spec[2] if len(spec) > 2 else None
            self.add_column(label, key=key, width=width)

    @property
    def keys(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)

    @property
    def total_rows(self) -> int:
        """How many rows the table was given, before its filter."""
        return len(self._lazy[0]) if self._lazy is not None else len(self._all_rows)

    @property
    def current_key(self) -> str | None:
        """Key of the row under the cursor, or None for an empty table."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def _reapply(self) -> None:
        if self._lazy is not None:
            self._apply_lazy()
            return
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
            keys = [k for k in keys if needle in " ".join(plain(c) for c in rows[k]).casefold()]
        if self.sort_by is not None:
            i, down = self.sort_by
            keys.sort(key=lambda k: sort_key(rows[k][i] if i < len(rows[k]) else ""), reverse=down)
        self._view_keys = keys
        return {k: rows[k] for k in keys}

    def sync(
        self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None
    ) -> int:
        """Make the table show `rows` (key -> cells, in order), through the filter and the sort
        the operator chose; returns how many cells changed."""
        self._lazy = self._make = None
        self._all_rows = dict(rows)
        self._all_heights = dict(heights or {})
        if not self.filter_text and self.sort_by is None:
            self._view_keys = list(rows)
            return self._sync(rows, heights)
        changed = self._sync(self._view(rows), heights)
        self._show_in_title()
        return changed

    def _sync(
        self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None
    ) -> int:
        """Make the table show `rows` (key -> cells, in order); returns how many cells changed.

        Cells equal to what is shown are left alone; rows whose key vanished are removed and new
        keys appended, then moved into the given order only if the order itself changed.
        """
        heights = heights or {}
        changed = 0
        # read before any row goes: removing a row above the cursor shifts the rows under it
        held = self.current_key
        for key in [k for k in self._cells if k not in rows]:
            self.remove_row(key)
            del self._cells[key]
            self._tall -= self._heights.pop(key, 1) != 1
            self._given.pop(key, None)
            changed += 1
        col_keys = [ColumnKey(spec[0]) for spec in self._spec]
        touched = False
        for key, given in rows.items():
            h = heights.get(key, 1)
            if self._given.get(key) is given and key in self._cells and self._heights.get(key) == h:
                continue  # the caller handed the very row it handed last time: nothing changed
            self._given[key] = given
            cells = tuple(one_line_each(c) for c in given)
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key, height=h)
                self._heights[key] = h
                self._tall += h != 1
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
                        if (
                            column.auto_width
                            and isinstance(b, Text)
                            and b.cell_len > column.content_width
                        ):
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
            held, self._restore_key = self._restore_key, None
        if self._order != wanted:
            self._reorder(wanted, held)
        elif held is not None and held in rows and self.current_key != held:
            self.move_cursor(row=wanted.index(held), animate=False)
        self.cells_changed += changed
        return changed

    def _reorder(self, wanted: list[str], held: str | None = None) -> None:
        """Show the rows in `wanted` order, the cursor on `held` (default: the row under it)."""
        current = held if held is not None and held in wanted else self.current_key
        # DataTable.sort() hands the key function cell values only; order by key instead
        self._row_locations = TwoWayDict({RowKey(k): i for i, k in enumerate(wanted)})
        self._order = list(wanted)
        self._layout_version += 1
        self._update_count += 1
        self.refresh()
        # sorting moves rows, not the cursor: keep it on the same row
        if current is not None and current in self._row_locations:
            self.move_cursor(row=self._row_locations.get(RowKey(current)), animate=False)

    # -- the row order, kept as a list, and the layout caches keyed by it -----------------------
    def add_row(
        self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None
    ) -> RowKey:
        # the order first: add_row's cursor watchers already read the rows in order
        if key is not None:
            self._order.append(key)
            self._layout_version += 1
        try:
            row_key = super().add_row(*cells, height=height, key=key, label=label)
        except Exception:
            if key is not None:
                self._order.pop()
            raise
        if key is None:
            self._order.append(row_key.value)
            self._layout_version += 1
        return row_key

    def remove_row(self, row_key: RowKey | str) -> None:
        key = row_key.value if isinstance(row_key, RowKey) else row_key
        self._order.remove(key)  # before remove_row's cursor watchers read the rows in order
        self._layout_version += 1
        super().remove_row(row_key)

    def clear(self, columns: bool = False) -> KeyedTable:
        super().clear(columns)
        self._order = []
        self._cells.clear()
        self._heights.clear()
        self._tall = 0
        self._given.clear()
        self._fresh.clear()
        self._layout_version += 1
        return self

    def sort(self, *columns: Any, key: Any = None, reverse: bool = False) -> KeyedTable:
        super().sort(*columns, key=key, reverse=reverse)
        self._order = [
            self._row_locations.get_key(i).value for i in range(len(self._row_locations))
        ]
        self._layout_version += 1
        return self

    def _set_height(self, key: str, h: int) -> None:
        # DataTable has no API to change a row's height; its layout caches are keyed by the
        # update count, so bumping that (via a no-op cell write) makes it re-measure.
        self.rows[RowKey(key)].height = h
        self._tall += (h != 1) - (self._heights.get(key, 1) != 1)
        self._heights[key] = h
        self._layout_version += 1
        self._require_update_dimensions = True
        first = self._spec[0][0]
        self.update_cell(key, first, self.get_cell(key, first))
