"""A DataTable that is synced from a dict of rows by key, changing only what changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.style import Style as RichStyle
from textual import events
from textual.actions import SkipAction
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, Row, RowKey

from fleetdeck.tui.modals.filter_prompt import FilterPrompt
from fleetdeck.tui.widgets.column_sort import ColumnSpec
from fleetdeck.tui.widgets.lazy_rows import LazyRows
from fleetdeck.tui.widgets.row_sync import RowSync
from fleetdeck.tui.widgets.table_lines import RowLine, SegmentLines, TableLines
from fleetdeck.tui.widgets.table_store import NavTable, TableStore

#: `NavTable` is imported from here by the modals that show a plain table
__all__ = ["KeyedTable", "NavTable"]


class KeyedTable(TableStore):
    """Rows keyed by a stable id (host, run, schedule); `sync()` updates cell by cell.

    Rows are added or removed only when the set of keys changes, so the cursor and the scroll
    position survive every refresh. Every such table can be filtered (`/`: the rows whose shown
    text holds the filter, in any case; `esc` clears it) and sorted (`o`: the next column up,
    then down, then the view's own order); both are named in the screen's title. Made with
    `column_sort=True`, shift and a column's letter (underlined in its header) or a click on the
    header sorts by that column at once (`column_sort.py`). The filter and the sort are saved
    per view and table (`tui/settings.py`) when the app keeps settings. `sync_lazy` makes a
    row's cells only when it is drawn (`lazy_rows.py`).

    The table owns three collaborators: its lines' renderer (`TableLines`), its lazy rows
    (`LazyRows`) and its rows synced by key (`RowSync`); they are typed against its base, the
    store of its rows, their order and the operator's filter and sort (`TableStore`,
    `table_store.py`), which imports none of them. Textual calls the DataTable members it
    overrides on the widget, so those stay here, each a thin call.
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
        columns: Sequence[ColumnSpec],
        *,
        column_sort: bool = False,
        **kw: Any,
    ) -> None:
        kw.setdefault("cursor_type", "row")
        kw.setdefault("zebra_stripes", True)
        self._lines = TableLines(self)
        #: the update count the render caches keyed by it were last emptied at (`render_lines`)
        self._drawn_count = -1
        self._lazy: LazyRows = LazyRows(self)
        self._rows: RowSync = RowSync(self)
        super().__init__(columns, column_sort=column_sort, **kw)

    def on_mount(self) -> None:
        self.choice.load(self, self._spec)
        self._add_columns()

    @property
    def filter_text(self) -> str:
        """The filter: the rows whose shown text holds it, in any case, are shown."""
        return self.choice.filter_text

    @filter_text.setter
    def filter_text(self, text: str) -> None:
        self.choice.filter_text = text

    @property
    def sort_by(self) -> tuple[int, bool] | None:
        """The sort: (column index, downward), or None for the view's own order."""
        return self.choice.sort_by

    @property
    def column_sort(self) -> bool:
        """Whether shift and a column's letter, or a click on its header, sorts by it."""
        return self.choice.column_sort

    def set_columns(self, columns: Sequence[ColumnSpec]) -> bool:
        """Show `columns` (key, label[, width]) from now on, without replacing the widget.

        Same keys: widths and labels change in place. Other keys (a narrow terminal drops
        minor columns): the columns are re-added and every row comes back with the next
        `sync()`, the cursor on the same key. Returns True when the caller must `sync()` again.
        Replacing the widget instead raced with itself under a storm of resizes (two tables
        with one id for a moment: `DuplicateIds`).
        """
        return self._rows.set_columns(list(columns))

    @property
    def keys(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)

    @property
    def total_rows(self) -> int:
        """How many rows the table was given, before its filter."""
        given = self._lazy.given
        return len(given[0]) if given is not None else len(self._all_rows)

    def _reapply(self) -> None:
        if self._lazy.given is not None:
            self._lazy.apply()
            return
        self._rows.sync(self.choice.view(self._all_rows), self._all_heights)
        self._show_in_title()

    def sync(
        self, rows: Mapping[str, Sequence[Any]], heights: Mapping[str, int] | None = None
    ) -> int:
        """Make the table show `rows` (key -> cells, in order), through the filter and the sort
        the operator chose; returns how many cells changed."""
        self._lazy.drop()
        self._all_rows = dict(rows)
        self._all_heights = dict(heights or {})
        choice = self.choice
        if not choice.filter_text and choice.sort_by is None:
            choice.view_keys = list(rows)
            return self._rows.sync(rows, heights)
        changed = self._rows.sync(choice.view(rows), heights)
        self._show_in_title()
        return changed

    # -- the filter and the sort (`TableChoice`), as the operator sets them -------------------
    def none_matched(self, noun: str) -> str | None:
        """`The filter 'x' matched 0 of 68 hosts (...)` while the filter lets no row of a table
        that has rows through (a view says it where it would say it has none); else None."""
        return self.choice.none_matched(noun, self.total_rows)

    def set_filter(self, text: str) -> None:
        """Show only the rows whose shown text holds `text` (any case); '' shows every row."""
        self.choice.filter_text = text
        self._reapply()
        self._choice_changed()

    def sort_changed(self) -> None:
        self._reapply()
        self._relabel()
        self._choice_changed()

    def _relabel(self) -> None:
        """The headers again (the sort's arrow moved)."""
        if not self.choice.column_sort:
            return
        for spec, label in zip(self._spec, self.choice.column_labels(self._spec), strict=True):
            col = self.columns.get(ColumnKey(spec[0]))
            if col is not None:
                col.label = label
        self._require_update_dimensions = True
        self._update_count += 1
        self.refresh()

    def _choice_changed(self) -> None:
        self.choice.save(self, self._spec)
        self.post_message(self.ChoiceChanged(self))

    def on_key(self, event: events.Key) -> None:
        ch = event.character
        if not self.choice.column_sort or ch is None or len(ch) != 1 or not ("A" <= ch <= "Z"):
            return
        index = self.choice.letters(self._spec).get(ch)
        if index is not None:
            event.stop()
            event.prevent_default()
            self.choice.sort_on(index)
            self.sort_changed()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        if self.choice.column_sort and event.data_table is self:
            event.stop()
            self.choice.sort_on(event.column_index)
            self.sort_changed()

    def action_filter(self) -> None:
        self.app.push_screen(FilterPrompt(self))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # without a filter, esc is not this table's: the screen's esc (back, close) shows in
        # the footer and runs, as before
        if action == "clear_filter" and not self.choice.filter_text:
            return False
        return super().check_action(action, parameters)

    def action_clear_filter(self) -> None:
        if not self.choice.filter_text:
            raise SkipAction()
        self.set_filter("")

    def action_cycle_sort(self) -> None:
        self.choice.cycle(len(self._spec))
        self.sort_changed()

    # -- lazy rows (`LazyRows`): DataTable's readers fill a row before they read it -----------
    def sync_lazy(
        self,
        keys: Sequence[str],
        make: Callable[[str], Sequence[Any]],
        heights: Mapping[str, int] | None = None,
    ) -> None:
        """Make the table show one row per key of `keys` (in order), whose cells `make(key)`
        computes only when the row is needed (`LazyRows.sync` says when)."""
        self._lazy.sync(keys, make, heights)

    def get_row(self, row_key: RowKey | str) -> list[Any]:
        self._lazy.fill_key(row_key)
        return super().get_row(row_key)

    def get_row_at(self, row_index: int) -> list[Any]:
        self._lazy.fill_at(row_index)
        return super().get_row_at(row_index)

    def get_cell(self, row_key: RowKey | str, column_key: ColumnKey | str) -> Any:
        self._lazy.fill_key(row_key)
        return super().get_cell(row_key, column_key)

    def get_cell_at(self, coordinate: Coordinate) -> Any:
        self._lazy.fill_at(coordinate.row)
        return super().get_cell_at(coordinate)

    def keys_on_screen(self) -> list[str]:
        """The keys of the rows on the table's lines now on screen, top first (none before it
        has a size)."""
        top = self.scroll_offset.y
        out: list[str] = []
        for rk, _ in self._y_offsets[top : top + self.size.height]:
            if rk.value and (not out or out[-1] != rk.value):
                out.append(rk.value)
        return out

    # -- drawing (`TableLines`): the overrides Textual and DataTable call ---------------------
    @property
    def ordered_rows(self) -> list[Row]:
        """The rows in display order (cached until rows come, go, move or change height)."""
        return self._lines.ordered_rows()

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        return self._lines.y_offsets()

    def render_lines(self, crop: Region) -> list[Strip]:
        if self._update_count != self._drawn_count:
            # the caches keyed by the update count hold only dead entries once it moved on:
            # DataTable empties them on its own changes, the table's syncs did not, and each
            # poll left a frame of them up to the LRU bounds (megabytes; test_tui_at_rest.py)
            self._drawn_count = self._update_count
            for cache in (
                self._cell_render_cache,
                self._row_render_cache,
                self._row_renderable_cache,
                self._line_cache,
                self._lines.row_lines_cache,
            ):
                cache.clear()
        return self._lines.render_lines(crop)

    def render_line(self, y: int) -> Strip:
        return self._lines.render_line(y)

    def redraw_rows(self, keys: Sequence[str]) -> None:
        super().redraw_rows(keys)
        self._lines.row_lines_cache.clear()  # the changed rows' lines held there are stale

    def _render_line(self, y: int, x1: int, x2: int, base_style: RichStyle) -> Strip:
        return self._lines.render_table_line(y, x1, x2, base_style)

    def _render_line_in_row(
        self,
        row_key: RowKey,
        line_no: int,
        base_style: RichStyle,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> RowLine:
        return self._lines.render_line_in_row(
            row_key, line_no, base_style, cursor_location, hover_location
        )

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: RichStyle,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        return self._lines.render_cell(row_index, column_index, base_style, width, cursor, hover)
