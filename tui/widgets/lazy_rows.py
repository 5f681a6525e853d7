"""Lazy rows for `KeyedTable`: one row per key, whose cells are made only when the row is
drawn, or when the filter, the sort or a reader (`get_row`, `get_cell`) needs them.

A mixin: it keeps the rows in the table's own store (`_order`, `_cells`, `_heights`, kept by
`KeyedTable`) and goes through its `_sync`, `_view` and `_show_in_title` when the filter or
the sort needs every row's text. Adding and removing rows in bulk writes DataTable's row store
directly (its `add_row` measures each row and `remove_row` renumbers every row), one of the
private members `tests/tui/test_keyed_table_contract.py` pins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.coordinate import Coordinate
from textual.widgets.data_table import ColumnKey, Row, RowKey

from fleetdeck.tui.widgets.table_lines import one_line_each

_BLANK = Text("")


class LazyRows:
    """`sync_lazy` and the readers that fill a lazy row before they read it."""

    def sync_lazy(
        self,
        keys: Sequence[str],
        make: Callable[[str], Sequence[Any]],
        heights: Mapping[str, int] | None = None,
    ) -> None:
        """Make the table show one row per key of `keys` (in order), whose cells `make(key)`
        computes only when the row is drawn, or when the filter, the sort or a reader
        (`get_row`, `get_cell`) needs them. Every row is stale after this call; a row on
        screen is made again at the next frame, one off screen when it scrolls into view.
        `heights` (key -> lines, default 1) must be known up front: they lay the table out.
        For tables whose columns all have a fixed width (a lazy row is never measured).
        """
        self._lazy = (list(keys), make, dict(heights or {}))
        self._apply_lazy()

    def _apply_lazy(self) -> None:
        assert self._lazy is not None
        keys, make, heights = self._lazy
        if self.filter_text or self.sort_by is not None:
            # both need every row's text: made now, then synced as given rows
            self._make = None
            self._fresh.clear()
            rows = {}
            for k in keys:
                rows[k] = make(k)
            self._all_rows, self._all_heights = rows, heights
            self._sync(self._view(rows), heights)
            self._show_in_title()
            return
        self._view_keys = keys
        if self._order != keys:
            self._add_and_remove(keys, heights)
        if heights or self._tall:
            for k in self._order:
                h = heights.get(k, 1)
                if self._heights.get(k, 1) != h:
                    self.rows[RowKey(k)].height = h
                    self._heights[k] = h
                    self._tall += 1 if h != 1 else -1
                    self._layout_version += 1
                    self._require_update_dimensions = True
        self._make = make
        self._fresh = set()
        self._given.clear()
        self._update_count += 1
        self.refresh()
        if self._require_update_dimensions:
            self.check_idle()
        self._show_in_title()

    def _add_and_remove(self, keys: list[str], heights: Mapping[str, int]) -> None:
        """Rows added and removed in bulk (DataTable's `add_row` measures each new row and its
        `remove_row` renumbers every row: quadratic for 10,000 schedules)."""
        current = self.current_key
        was_empty = not self._order
        wanted = set(keys)
        gone = [k for k in self._order if k not in wanted]
        for key in gone:
            rk = RowKey(key)
            del self._data[rk]
            del self.rows[rk]
            del self._cells[key]
            self._tall -= self._heights.pop(key, 1) != 1
            self._given.pop(key, None)
        col_keys = [ColumnKey(spec[0]) for spec in self._spec]
        blank = tuple(_BLANK for _ in col_keys)
        # a copied dict keeps its keys' hashes: a column key hashes in Python, 7 per row
        template = dict(zip(col_keys, blank, strict=True))
        data, rows, cells, all_heights = self._data, self.rows, self._cells, self._heights
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
                    self._tall += 1
        self._row_locations = TwoWayDict(locations)
        self._order = list(keys)
        self._layout_version += 1
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # clamped into the rows there are
        self.hover_coordinate = self.hover_coordinate
        if self._restore_key is not None:
            current, self._restore_key = self._restore_key, None
        if current is not None and current in wanted:
            self.move_cursor(row=self._row_locations.get(RowKey(current)), animate=False)
        elif was_empty and keys and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()  # as add_row does for a table's first row
        self.refresh(layout=True)

    def _fill(self, key: str) -> None:
        """Make the cells of lazy row `key` now; cells equal to those shown keep their object
        (the render cache is keyed by it)."""
        self._fresh.add(key)
        assert self._make is not None
        cells = tuple(one_line_each(c) for c in self._make(key))
        old = self._cells.get(key)
        if old is not None and len(old) == len(cells):
            cells = tuple(a if a is b or a == b else b for a, b in zip(old, cells, strict=True))
            self.cells_changed += sum(1 for a, b in zip(old, cells, strict=True) if a is not b)
        row = self._data[RowKey(key)]
        for spec, cell in zip(self._spec, cells, strict=False):
            row[ColumnKey(spec[0])] = cell
        self._cells[key] = cells

    def _fill_key(self, row_key: Any) -> None:
        if self._make is not None:
            key = row_key.value if isinstance(row_key, RowKey) else row_key
            if key not in self._fresh and key in self._cells:
                self._fill(key)

    def get_row(self, row_key: RowKey | str) -> list[Any]:
        self._fill_key(row_key)
        return super().get_row(row_key)

    def get_row_at(self, row_index: int) -> list[Any]:
        if self._make is not None and 0 <= row_index < len(self._order):
            self._fill_key(self._order[row_index])
        return super().get_row_at(row_index)

    def get_cell(self, row_key: RowKey | str, column_key: ColumnKey | str) -> Any:
        self._fill_key(row_key)
        return super().get_cell(row_key, column_key)

    def get_cell_at(self, coordinate: Coordinate) -> Any:
        if self._make is not None and 0 <= coordinate.row < len(self._order):
            self._fill_key(self._order[coordinate.row])
        return super().get_cell_at(coordinate)
