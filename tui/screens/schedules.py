"""The Schedules view: every cron entry, timer, at job and loop; stray ones flagged with why."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from fleetdeck.backend import acks as backend_acks
from fleetdeck.backend import state as backend_state
from fleetdeck.backend.models import Schedule

from ..messages import ActionFinished
from ..widgets.keyed_table import KeyedTable
from .base import ViewScreen


def schedule_key(s: Schedule) -> str:
    """Fleet-wide row key: schedule ids are stable per host."""
    return f"{s.host}/{s.id}"


class SchedulesScreen(ViewScreen):
    """Schedules across the fleet; a acknowledges, x removes (id typed back)."""

    BINDINGS = [
        Binding("a", "acknowledge", "Acknowledge",
                tooltip="acknowledge the highlighted schedule (no longer stray for being unknown)"),
        Binding("x", "remove", "Remove", tooltip="remove it: type its id back to confirm"),
    ]

    def compose_body(self) -> ComposeResult:
        # the command goes last: it is the long one, and the reasons must stay visible at 100 columns
        yield KeyedTable([("flag", " ", 1), ("host", "Host"), ("kind", "Kind"), ("why", "Stray because"),
                          ("user", "User"), ("spec", "When"), ("cmd", "Command")],
                         id="sched-table")
        yield Static(id="sched-detail", classes="detail")

    @property
    def table(self) -> KeyedTable:
        """The schedules table."""
        return self.query_one("#sched-table", KeyedTable)

    @property
    def selected(self) -> Schedule | None:
        """The schedule under the cursor."""
        key = self.table.current_key
        if key is None:
            return None
        host, sid = key.split("/", 1)
        return self.state.schedule(host, sid)

    def refresh_view(self) -> None:
        rows = {}
        for s in sorted(self.state.schedules, key=lambda s: (not s.stray, s.host, s.kind, s.id)):
            style = "bold red" if s.stray else ("dim" if not s.active else "")
            rows[schedule_key(s)] = (
                Text("⚠" if s.stray else " ", style="bold red"), s.host, s.kind,
                Text(", ".join(s.reasons) if s.reasons else "acknowledged", style=style or "green"),
                s.user, Text(s.spec, style=style), Text(s.command.replace("\n", " "), style=style))
        with self.app.batch_update():
            self.table.sync(rows)
            self.show_detail()

    def show_detail(self) -> None:
        """Everything about the highlighted schedule, including where it is defined."""
        s = self.selected
        d = self.query_one("#sched-detail", Static)
        if s is None:
            d.update(Text("No schedules found on any reachable host.", style="dim"))
            return
        t = Text()
        t.append(f"{s.id}", style="bold")
        t.append(f"  {s.kind} on {s.host} as {s.user}, from {s.source}")
        if s.pid:
            t.append(f", pid {s.pid}")
        if s.next_run:
            t.append(f", next {s.next_run}")
        if not s.active:
            t.append(" (inactive)", style="dim")
        t.append("\n")
        t.append(s.command)
        if s.stray:
            t.append(f"\nstray: {', '.join(s.reasons)}  —  a: acknowledge   x: remove", style="bold red")
        d.update(t)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def action_acknowledge(self) -> None:
        """Mark the highlighted schedule as known to the operator."""
        s = self.selected
        if s is None:
            self.notify("No schedule selected.", severity="warning")
            return
        try:
            backend_acks.acknowledge(on_host=[(s.host, s.id)])
            backend_state.audit("schedule-ack", s.host, "done", ids=[s.id], via="dashboard")
        except OSError as e:
            self.app.report_error("Acknowledge", e)
            return
        self.app.post_message(ActionFinished("acknowledge", s.host, True,
                                             f"{s.id} on {s.host} acknowledged."))

    def action_remove(self) -> None:
        """Remove the highlighted schedule or stop the loop, after its id is typed back."""
        s = self.selected
        if s is None:
            self.notify("No schedule selected.", severity="warning")
            return
        from .remove import RemoveScheduleModal
        self.app.push_screen(RemoveScheduleModal(s))
