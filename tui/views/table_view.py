"""The base of the views built around one responsive table (Fleet, Runs, Schedules): the
columns chosen for the terminal's width, and for what the rows hold where the view measures
it, laid out again as the terminal resizes. The table keeps its cursor, scroll position, sort
and filter through a new layout (`KeyedTable.set_columns`)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from fleetdeck.tui.views.base import ViewScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable


class TableView(ViewScreen):
    """A view whose body is one `KeyedTable` of `COLUMNS`, its widths from `column_widths`."""

    #: the table's widget id
    TABLE_ID: ClassVar[str]
    #: every column the table can show: key -> header, in their order on screen
    COLUMNS: ClassVar[dict[str, str]]

    #: the columns shown now: key -> width, in `COLUMNS` order
    _widths: dict[str, int]
    #: what the rows hold that the widths follow (the longest text of a column), once measured
    _need: dict[str, int] | None = None

    def column_widths(self, width: int, need: dict[str, int] | None) -> dict[str, int]:
        """The columns shown in a terminal `width` wide and their widths, in `COLUMNS` order."""
        raise NotImplementedError

    def make_table(self) -> KeyedTable:
        """The table, laid out for the app's width (the screen has no size before it mounts)."""
        return KeyedTable(
            self._columns(self.column_widths(self.app.size.width, None)),
            id=self.TABLE_ID,
            column_sort=True,
        )

    def _columns(self, w: dict[str, int]) -> list[tuple[str, str, int]]:
        self._widths = w
        return [(k, self.COLUMNS[k], w[k]) for k in w]

    @property
    def table(self) -> KeyedTable:
        """The view's table."""
        return self.query_one(f"#{self.TABLE_ID}", KeyedTable)

    def relayout(self, width: int) -> bool:
        """Lay the table out for `width` (and `_need`); True when its columns changed."""
        w = self.column_widths(width, self._need)
        if w == self._widths:
            return False
        self.table.set_columns(self._columns(w))
        return True

    def filtered_out(self, noun: str) -> Text | None:
        """`The filter 'x' matched 0 of 12 runs (...)` when no row is highlighted because the
        filter lets none of the table's rows through; else None."""
        table = self.table
        if not (table.filter_text and table.total_rows):
            return None
        n = table.total_rows
        return Text(
            f"The filter {table.filter_text!r} matched 0 of {n} {noun}{'' if n == 1 else 's'} "
            "(/ changes it, esc clears it).",
            style="dim",
        )

    def on_resize(self) -> None:
        # the same table, new widths: the cursor and the scroll position stay
        if self.relayout(self.size.width) and self.ready:
            self.refresh_view()
