"""How a `KeyedTable`'s rows follow what it is given: `sync` changes only the cells that
changed, adds and removes rows only when the set of keys changes, and moves rows only when their
order changed, so the cursor and the scroll position survive every poll.

A collaborator the table owns (`KeyedTable._rows`): the rows themselves stay in the table's own
store (`TableStore`: `_order`, `_cells`, `_heights`, `_given`) and in DataTable's, whose private members it
writes in place of `update_cell` and `sort` (one refresh per poll, not one per cell), as
`tests/tui/test_keyed_table_contract.py` pins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.widgets.data_table import CellKey, ColumnKey, RowKey

from fleetdeck.tui.widgets.column_sort import ColumnSpec
from fleetdeck.tui.widgets.table_store import TableStore
from fleetdeck.tui.widgets.text_cell import one_line_each


class RowSync:
    """The table's rows made to match what it is given (`KeyedTable.sync`, a change of its
    columns, a row's height)."""

    def __init__(self, table: TableStore) -> None:
        self.table = table

    def sync(
        self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None
    ) -> int:
        """Make the table show `rows` (key -> cells, in order); returns how many cells changed.

        Cells equal to what is shown are left alone; rows whose key vanished are removed and new
        keys appended, then moved into the given order only if the order itself changed.
        """
        t = self.table
        heights = heights or {}
        changed = 0
        # read before any row goes: removing a row above the cursor shifts the rows under it
        held = t.current_key
        for key in [k for k in t._cells if k not in rows]:
            t.remove_row(key)
            del t._cells[key]
            t._tall -= t._heights.pop(key, 1) != 1
            t._given.pop(key, None)
            changed += 1
        col_keys = [ColumnKey(spec[0]) for spec in t._spec]
        touched = False
        for key, given in rows.items():
            h = heights.get(key, 1)
            if t._given.get(key) is given and key in t._cells and t._heights.get(key) == h:
                continue  # the caller handed the very row it handed last time: nothing changed
            t._given[key] = given
            cells: tuple[Any, ...] = tuple(one_line_each(c) for c in given)
            old = t._cells.get(key)
            if old is None:
                t.add_row(*cells, key=key, height=h)
                t._heights[key] = h
                t._tall += h != 1
                changed += len(cells)
            else:
                if t._heights.get(key) != h:
                    self.set_height(key, h)
                row = t._data[RowKey(key)]
                for i, (a, b) in enumerate(zip(old, cells, strict=True)):
                    if a is not b and a != b:
                        # what update_cell does, minus its refresh() per cell: one refresh below
                        row[col_keys[i]] = b
                        changed += 1
                        touched = True
                        column = t.columns[col_keys[i]]
                        if (
                            column.auto_width
                            and isinstance(b, Text)
                            and b.cell_len > column.content_width
                        ):
                            # a wider value (159/159 after 9/159): let the column grow to show it
                            t._updated_cells.add(CellKey(RowKey(key), col_keys[i]))
                            t._require_update_dimensions = True
            t._cells[key] = cells
        if touched:
            t._update_count += 1
            t.refresh()
        wanted = list(rows)
        if t._restore_key is not None:
            # the rows came back after a change of columns: the cursor goes where it was
            held, t._restore_key = t._restore_key, None
        if t._order != wanted:
            self.reorder(wanted, held)
        elif held is not None and held in rows and t.current_key != held:
            t.move_cursor(row=wanted.index(held), animate=False)
        t.cells_changed += changed
        return changed

    def reorder(self, wanted: list[str], held: str | None = None) -> None:
        """Show the rows in `wanted` order, the cursor on `held` (default: the row under it)."""
        t = self.table
        current = held if held is not None and held in wanted else t.current_key
        # DataTable.sort() hands the key function cell values only; order by key instead
        t._row_locations = TwoWayDict({RowKey(k): i for i, k in enumerate(wanted)})
        t._order = list(wanted)
        t._layout_version += 1
        t._update_count += 1
        t.refresh()
        # sorting moves rows, not the cursor: keep it on the same row
        if current is not None and current in t._row_locations:
            t.move_cursor(row=t._row_locations.get(RowKey(current)), animate=False)

    def set_height(self, key: str, h: int) -> None:
        """Row `key` is `h` lines tall from now on."""
        t = self.table
        # DataTable has no API to change a row's height; its layout caches are keyed by the
        # update count, so bumping that (via a no-op cell write) makes it re-measure.
        t.rows[RowKey(key)].height = h
        t._tall += (h != 1) - (t._heights.get(key, 1) != 1)
        t._heights[key] = h
        t._layout_version += 1
        t._require_update_dimensions = True
        first = t._spec[0][0]
        t.update_cell(key, first, t.get_cell(key, first))

    def set_columns(self, new: list[ColumnSpec]) -> bool:
        """`KeyedTable.set_columns`."""
        t = self.table
        if new == t._spec:
            return False
        t.choice.follow(t._spec, new)
        if [c[0] for c in new] == [c[0] for c in t._spec]:
            t._spec = new
            for spec, label in zip(new, t.choice.column_labels(t._spec), strict=True):
                col = t.columns[ColumnKey(spec[0])]
                col.label = Text.from_markup(label) if isinstance(label, str) else label
                if len(spec) > 2 and spec[2] is not None:
                    col.width, col.auto_width = spec[2], False
                else:
                    col.auto_width = True
            t._spec = new
            t._require_update_dimensions = True
            t._update_count += 1
            t.refresh()
            return False
        t._restore_key = t.current_key
        t.clear(columns=True)
        t._spec = new
        t._add_columns()
        return True
