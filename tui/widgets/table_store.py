"""The store of a `KeyedTable`: the rows it shows, in order, and the state its collaborators
share, typed in one place that imports none of them.

`KeyedTable` (`keyed_table.py`) builds its collaborators (`TableLines`, `LazyRows`, `RowSync`),
and they read and write the table's own store: they are typed against `TableStore`, the base
between `NavTable` and `KeyedTable`, so no module of the table imports the one that imports it,
not even for its types (`tests/house/test_layering.py`). Where the store names a collaborator
(`_lazy`, `_rows`), it names a protocol of just the members the others use; `KeyedTable` holds
the collaborators themselves. The row order is kept here beside DataTable's own row store, whose
private members `tests/tui/test_keyed_table_contract.py` pins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, Self

from textual.binding import Binding
from textual.geometry import Region
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from fleetdeck.tui.widgets.column_sort import ColumnSpec, TableChoice


class NavTable(DataTable):
    """A DataTable with the keys of k9s and lazygit: j / k, Home / End to the first / last row
    (DataTable's own Home / End scroll sideways), PgUp / PgDn."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, tooltip="next row"),
        Binding("k", "cursor_up", "Up", show=False, tooltip="previous row"),
        Binding("home", "scroll_top", "First", show=False, tooltip="first row"),
        Binding("end", "scroll_bottom", "Last", show=False, tooltip="last row"),
    ]


class LazyFill(Protocol):
    """What the store and the renderer use of the table's lazy rows (`LazyRows`)."""

    #: what makes a row's cells while rows are made as they are drawn (None: no row waits)
    make: Callable[[str], Sequence[Any]] | None
    #: the rows made since the last `sync_lazy`
    fresh: set[str]

    def fill_key(self, row_key: RowKey | str) -> None:
        """Make row `row_key`'s cells now if it waits for them."""


class SyncsRows(Protocol):
    """What the lazy rows use of the table's row sync (`RowSync`)."""

    def sync(
        self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None
    ) -> int:
        """Make the table show `rows` (key -> cells, in order); returns how many cells changed."""


class TableStore(NavTable):
    """A `NavTable` that keeps its rows by key, in display order, with their cells and heights
    as last shown, and the operator's filter and sort (`choice`). `KeyedTable` sets `_lazy`
    and `_rows` before it calls this `__init__`."""

    #: the table's lazy rows (`LazyRows`)
    _lazy: LazyFill
    #: the table's rows synced by key (`RowSync`)
    _rows: SyncsRows

    def __init__(self, columns: Sequence[ColumnSpec], *, column_sort: bool, **kw: Any) -> None:
        #: row keys in display order (DataTable keeps only key -> index)
        self._order: list[str] = []
        #: bumped whenever rows come, go, move or change height: the line offsets and the
        #: ordered rows are cached by it, not by DataTable's update count (which every changed
        #: cell bumps, and which made each poll walk every row of a 10,000-row table again)
        self._layout_version = 0
        #: how many cells sync or a lazy row's filling replaced, in all
        self.cells_changed = 0
        #: the filter and the sort the operator chose
        self.choice = TableChoice(column_sort)
        super().__init__(**kw)
        #: the rows and heights `sync` was given, before the filter and the sort
        self._all_rows: dict[str, Sequence[Any]] = {}
        self._all_heights: dict[str, int] = {}
        #: the row object each key was last given (a caller that keeps unchanged rows' objects
        #: lets sync skip them without comparing a cell)
        self._given: dict[str, Any] = {}
        self._spec: list[ColumnSpec] = list(columns)
        self._cells: dict[str, tuple[Any, ...]] = {}
        self._heights: dict[str, int] = {}
        #: how many rows are taller than one line
        self._tall = 0
        #: the key the cursor goes back to when the rows come back after a change of columns
        self._restore_key: str | None = None

    def redraw_rows(self, keys: Sequence[str]) -> None:
        """Rows `keys` changed cells, nothing else did: only their lines on screen are drawn
        again. The update count, which the line caches are keyed by, stays; the caches of lines
        are emptied instead (the lines on screen stay drawn; a cell drawn is cached by its
        object, `TableLines.render_cell`, so a line drawn again later costs little)."""
        for cache in (
            self._line_cache,
            self._row_render_cache,
            self._cell_render_cache,
            self._row_renderable_cache,
        ):
            cache.clear()
        top, header = self.scroll_offset.y, self.header_height if self.show_header else 0
        width, wanted = self.size.width, set(keys)
        # the lines of those rows on screen, neighbours in one region (one update each)
        regions: list[Region] = []
        for y, (rk, _) in enumerate(self._y_offsets[top : top + self.size.height - header]):
            if rk.value not in wanted:
                continue
            last = regions[-1] if regions else None
            if last is not None and last.bottom == header + y:
                regions[-1] = Region(0, last.y, width, last.height + 1)
            else:
                regions.append(Region(0, header + y, width, 1))
        if regions:
            self.refresh(*regions)

    def _add_columns(self) -> None:
        for spec, label in zip(self._spec, self.choice.column_labels(self._spec), strict=True):
            key = spec[0]
            width = spec[2] if len(spec) > 2 else None
            self.add_column(label, key=key, width=width)

    @property
    def current_key(self) -> str | None:
        """Key of the row under the cursor, or None for an empty table."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def describe(self) -> str:
        """The filter and sort in words, for the title ('' when neither is set)."""
        return self.choice.describe(self._spec, len(self._all_rows))

    def _show_in_title(self) -> None:
        try:
            screen = self.screen
        except Exception:
            return
        desc = self.describe()
        screen.title = f"{self.app.title} · {desc}" if desc else None

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
            self._order.append(str(row_key.value))
            self._layout_version += 1
        return row_key

    def remove_row(self, row_key: RowKey | str) -> None:
        key = row_key.value if isinstance(row_key, RowKey) else row_key
        self._order.remove(str(key))  # before remove_row's cursor watchers read the rows in order
        self._layout_version += 1
        super().remove_row(row_key)

    def clear(self, columns: bool = False) -> Self:
        super().clear(columns)
        self._order = []
        self._cells.clear()
        self._heights.clear()
        self._tall = 0
        self._given.clear()
        self._lazy.fresh.clear()
        self._layout_version += 1
        return self

    def sort(self, *columns: Any, key: Any = None, reverse: bool = False) -> Self:
        super().sort(*columns, key=key, reverse=reverse)
        order = [self._row_locations.get_key(i) for i in range(len(self._row_locations))]
        self._order = [str(k.value) for k in order if k is not None]
        self._layout_version += 1
        return self
