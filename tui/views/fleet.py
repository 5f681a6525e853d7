"""The Fleet view (home): one row per host, live figures, down hosts greyed with why and since when
(the rows: `tui/rows/fleet.py`)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from fleetdeck.tui.rows.fleet import COLUMNS, host_detail, host_height
from fleetdeck.tui.rows.fleet_cells import HostCells
from fleetdeck.tui.views.base import show_text
from fleetdeck.tui.views.table_view import TableView
from fleetdeck.tui.widgets.keyed_table import KeyedTable


def layout_widths(width: int) -> dict[str, int]:
    """The columns shown in a terminal `width` wide and their widths: all of them from 100
    columns (using up to 200); below that latency goes (the Host view has it) and the disks go
    under each host's status, while host, GPUs, live runs and the stray count keep theirs."""
    if width < 100:
        w = {"host": 8, "status": 16, "gpus": 24, "runs": 14, "stray": 5}
        extra = max(0, width - 80)
        w["gpus"] += extra // 2
        w["runs"] += extra - extra // 2
        return w
    w = {"host": 8, "status": 13, "lat": 5, "gpus": 24, "disks": 16, "runs": 14, "stray": 5}
    extra = max(0, min(width, 200) - 100)
    # the extra columns go where the detail is: history, disk paths, run names, reasons
    for key, share in (
        ("gpus", 0.3),
        ("disks", 0.25),
        ("runs", 0.25),
        ("status", 0.1),
        ("host", 0.1),
    ):
        w[key] += int(extra * share)
    return w


class FleetScreen(TableView):
    """Home: every host in one table; enter opens the host."""

    SHOWS_AGES = True
    TABLE_ID = "fleet-table"
    COLUMNS = COLUMNS

    BINDINGS = [
        Binding("enter", "open_host", "Host", tooltip="open the Host view of the highlighted host")
    ]

    def compose_body(self) -> ComposeResult:
        self._cells = HostCells()
        yield self.make_table()
        yield Static(id="fleet-detail", classes="detail")

    def column_widths(self, width: int, need: dict[str, int] | None) -> dict[str, int]:
        return layout_widths(width)

    def _columns(self, w: dict[str, int]) -> list[tuple[str, str, int]]:
        cols = super()._columns(w)
        if "disks" in w:
            return cols
        return [(k, "Status · disks" if k == "status" else h, n) for k, h, n in cols]

    def refresh_view(self) -> None:
        state, widths = self.state, self._widths
        names = list(state.host_names)
        # what the rows are made from: the polls taken, the columns, and the clock's second
        # only while a host is down or stale (their cells count whole seconds); the clock's
        # tick every second otherwise redoes nothing
        ages = any(
            state.is_stale(n) or (h is not None and not h.reachable)
            for n in names
            for h in (state.hosts.get(n),)
        )
        made_from = (
            state.polls,
            tuple(widths.items()),
            len(names),
            int(state.clock()) if ages else None,
        )
        if made_from == getattr(self, "_made_from", None):
            self.show_detail()
            return
        self._made_from = made_from
        # a host's cells are made when its row is drawn (or filtered, sorted, read): on a big
        # fleet most rows are off screen, and making them was most of a poll's cost; a cell
        # whose inputs are those it was made from is the one made before (`HostCells`)
        heights = {name: host_height(state, name, widths) for name in names}
        cells = self._cells

        def make(name: str) -> tuple:
            return cells.cells(state, name, widths)

        with self.app.batch_update():
            self.table.sync_lazy(names, make, heights)
        self.show_detail()

    def show_detail(self) -> None:
        """Update the line under the table for the highlighted host (or say the filter let
        none through)."""
        table = self.table
        none = table.none_matched("host") if table.current_key is None else None
        show_text(
            self.query_one("#fleet-detail", Static),
            Text(none, style="dim") if none else host_detail(self.state, table.current_key),
        )

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def on_keyed_table_choice_changed(self) -> None:
        self.show_detail()  # a filter that lets no row through moves no cursor

    def on_data_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
        if (name := event.row_key.value) is not None:  # every host's row has its name as key
            self.app.open_host(name)

    def action_open_host(self) -> None:
        """Open the host under the cursor."""
        key = self.table.current_key
        if key:
            self.app.open_host(key)
