"""Lazy rows for `KeyedTable`: one row per key, whose cells are made only when the row is
drawn, or when the filter, the sort or a reader (`get_row`, `get_cell`) needs them.

A store the table owns (`KeyedTable._lazy`): the rows themselves stay in the table's own store
(`_order`, `_cells`, `_heights`: `TableStore`, which it is typed against), and the table's
`_rows.sync`, its choice's `view` and its `_show_in_title` are used when the filter or the sort
needs every row's text. Adding and
removing rows in bulk writes DataTable's row store directly (its `add_row` measures each row and
`remove_row` renumbers every row), one of the private members
`tests/tui/test_keyed_table_contract.py` pins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.widgets.data_table import ColumnKey, Row, RowKey

from fleetdeck.tui.widgets.table_store import TableStore
from fleetdeck.tui.widgets.text_cell import one_line_each

_BLANK = Text("")


class LazyRows:
    """The lazy rows of a `KeyedTable`, which owns this store: what `sync_lazy` was given, what
    makes a drawn row's cells, and the rows made since; the readers' and the renderer's
    overrides on the table fill a row through `fill_key` before they read it."""

    def __init__(self, table: TableStore) -> None:
        self.table = table
        #: what `sync_lazy` was given: the keys in order, what makes a row's cells, the heights
        #: (None once `sync` is given rows instead)
        self.given: tuple[list[str], Callable[[str], Sequence[Any]], dict[str, int]] | None = None
        #: what makes a row's cells while rows are made as they are drawn (None: no row waits)
        self.make: Callable[[str], Sequence[Any]] | None = None
        #: the rows made since the last `sync_lazy`
        self.fresh: set[str] = set()

    def sync(
        self,
        keys: Sequence[str],
        make: Callable[[str], Sequence[Any]],
        heights: Mapping[str, int] | None = None,
    ) -> None:
        """`KeyedTable.sync_lazy`: one row per key of `keys` (in order), whose cells `make(key)`
        computes only when the row is drawn, or when the filter, the sort or a reader
        (`get_row`, `get_cell`) needs them. Every row is stale after this call; a row on
        screen is made again at the next frame, one off screen when it scrolls into view.
        `heights` (key -> lines, default 1) must be known up front: they lay the table out.
        For tables whose columns all have a fixed width (a lazy row is never measured).
        """
        self.given = (list(keys), make, dict(heights or {}))
        self.apply()

    def drop(self) -> None:
        """No lazy rows from now on (the table is given its rows)."""
        self.given = self.make = None

    def apply(self) -> None:
        """Show what `sync_lazy` was given, through the table's filter and sort."""
        assert self.given is not None
        t = self.table
        keys, make, heights = self.given
        if t.choice.filter_text or t.choice.sort_by is not None:
            # both need every row's text: made now, then synced as given rows
            self.make = None
            self.fresh.clear()
            rows = {}
            for k in keys:
                rows[k] = make(k)
            t._all_rows, t._all_heights = rows, heights
            t._rows.sync(t.choice.view(rows), heights)
            t._show_in_title()
            return
        t.choice.view_keys = keys
        layout, was_lazy = t._layout_version, self.make is not None
        if t._order != keys:
            self._add_and_remove(keys, heights)
        if heights or t._tall:
            for k in t._order:
                h = heights.get(k, 1)
                if t._heights.get(k, 1) != h:
                    t.rows[RowKey(k)].height = h
                    t._heights[k] = h
                    t._tall += 1 if h != 1 else -1
                    t._layout_version += 1
                    t._require_update_dimensions = True
        self.make = make
        # with the same rows in the same places, the rows on screen are made again now: those
        # whose cells all equal the ones shown (a poll that moved nothing on them) are not
        # drawn, the others are drawn again each in its own lines (`TableStore.redraw_rows`).
        # A row off screen is made when it is drawn or read.
        self.fresh = set()
        t._given.clear()
        if not was_lazy or layout != t._layout_version:
            t._update_count += 1
            t.refresh()
        else:
            changed = [k for k in self._on_screen() if self._fill(k, make)]
            if changed:
                t.redraw_rows(changed)
        if t._require_update_dimensions:
            t.check_idle()
        t._show_in_title()

    def _on_screen(self) -> set[str]:
        """The keys of the rows on the table's lines now on screen (none before it has a size)."""
        t = self.table
        top = t.scroll_offset.y
        return {rk.value for rk, _ in t._y_offsets[top : top + t.size.height] if rk.value}

    def _add_and_remove(self, keys: list[str], heights: Mapping[str, int]) -> None:
        """Rows added and removed in bulk (DataTable's `add_row` measures each new row and its
        `remove_row` renumbers every row: quadratic for 10,000 schedules)."""
        t = self.table
        current = t.current_key
        was_empty = not t._order
        wanted = set(keys)
        gone = [k for k in t._order if k not in wanted]
        for key in gone:
            rk = RowKey(key)
            del t._data[rk]
            del t.rows[rk]
            del t._cells[key]
            t._tall -= t._heights.pop(key, 1) != 1
            t._given.pop(key, None)
        col_keys = [ColumnKey(spec[0]) for spec in t._spec]
        blank = tuple(_BLANK for _ in col_keys)
        # a copied dict keeps its keys' hashes: a column key hashes in Python, 7 per row
        template: dict[ColumnKey, Any] = dict(zip(col_keys, blank, strict=True))
        data, rows, cells, all_heights = t._data, t.rows, t._cells, t._heights
        locations = {}
        for i, key in enumerate(keys):
            rk = RowKey(key)
            locations[rk] = i
            if key not in cells:
                h = heights.get(key, 1)
                data[rk] = template.copy()
                rows[rk] = Row(rk, h, None, False)
                cells[key] = blank
                all_heights[key] = h
                if h != 1:
                    t._tall += 1
        t._row_locations = TwoWayDict(locations)
        t._order = list(keys)
        t._layout_version += 1
        t._require_update_dimensions = True
        t.cursor_coordinate = t.cursor_coordinate  # clamped into the rows there are
        t.hover_coordinate = t.hover_coordinate
        if t._restore_key is not None:
            current, t._restore_key = t._restore_key, None
        if current is not None and current in wanted:
            t.move_cursor(row=t._row_locations.get(RowKey(current)), animate=False)
        elif was_empty and keys and t.show_cursor and t.cursor_type != "none":
            t._highlight_cursor()  # as add_row does for a table's first row
        t.refresh(layout=True)

    def _fill(self, key: str, make: Callable[[str], Sequence[Any]]) -> bool:
        """Make the cells of lazy row `key` now; cells equal to those shown keep their object
        (the render cache is keyed by it). True when a cell changed."""
        t = self.table
        self.fresh.add(key)
        cells = tuple(one_line_each(c) for c in make(key))
        old = t._cells.get(key)
        changed = len(cells)
        if old is not None and len(old) == len(cells):
            cells = tuple(a if a is b or a == b else b for a, b in zip(old, cells, strict=True))
            changed = sum(1 for a, b in zip(old, cells, strict=True) if a is not b)
            t.cells_changed += changed
        row = t._data[RowKey(key)]
        for spec, cell in zip(t._spec, cells, strict=False):
            row[ColumnKey(spec[0])] = cell
        t._cells[key] = cells
        return changed > 0

    def fill_key(self, row_key: RowKey | str) -> None:
        """Make row `row_key`'s cells now if it waits for them."""
        make = self.make
        if make is not None:
            key = row_key.value if isinstance(row_key, RowKey) else row_key
            if key is not None and key not in self.fresh and key in self.table._cells:
                if self._fill(key, make):
                    self.table.redraw_rows([key])

    def fill_at(self, row_index: int) -> None:
        """Make the cells of the row at `row_index` now if it waits for them."""
        if self.make is not None and 0 <= row_index < len(self.table._order):
            self.fill_key(self.table._order[row_index])
