"""The Alerts view's seats section: the fleet's serving seats and each card's headroom as a
bar with every seat's share (`SeatsSection.show`), `c` to check the highlighted seat on its
host (its row reads `checking…` at once, then the verdict, and the line under the table says it
in full) and `d` to describe it. A part of `AlertsScreen` (`tui/views/alerts.py`), which holds
the widgets, keeps one `SeatsSection` with the seats and the verdicts, and calls it from its
`c` and `d` actions and its `check` worker; the section reads the view as a `SeatsView`."""

from __future__ import annotations

from typing import Protocol, TypeVar

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static

from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.rules.alerts import AlertConfig
from fleetdeck.backend.monitor.seats import SeatCheck, headroom, host_seats, recorded_checks
from fleetdeck.show.fmt import host_text, human_mib, message_text, said, shown
from fleetdeck.tui.alert_watch import AlertWatch
from fleetdeck.tui.app_api import DashboardApp
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.modals.describe import describe_seat
from fleetdeck.tui.views.seats_panel import headroom_bar, no_bar_text, verdict_text
from fleetdeck.tui.widgets.keyed_table import KeyedTable

W = TypeVar("W", bound=Widget)


class SeatsView(Protocol):
    """What the seats section uses of the Alerts view."""

    #: the view's widgets exist (it has been mounted)
    ready: bool

    @property
    def app(self) -> DashboardApp: ...

    @property
    def state(self) -> FleetState: ...

    def query_one(self, selector: str, expect_type: type[W]) -> W: ...


class SeatsSection:
    """The seats table, the last check's line and the headroom bars of the Alerts view."""

    def __init__(self, view: SeatsView) -> None:
        self.view = view
        #: the seats shown, by their row key
        self.seats: dict[str, Seat] = {}
        #: the seats (`host:port`) being checked now, and the verdicts this view got, by seat
        self.checking: set[str] = set()
        self.verdicts: dict[str, SeatCheck] = {}
        #: the line under the seats table: what the last `c` found, in full
        self.last_said: Text | None = None

    def show(self) -> None:
        """The seats table, the last check's line, and one headroom bar per card that holds a
        seat (or why there is none)."""
        view = self.view
        checks = {**recorded_checks(), **self.verdicts}
        hosts = [h for n in view.state.host_names if (h := view.state.shown(n)) is not None]
        self.seats = {s.key: s for h in hosts for s in host_seats(h)}
        rows = {}
        for key, s in self.seats.items():
            c = checks.get(f"{s.host}:{s.port}")
            rows[key] = (
                s.host,
                host_text(s.name),
                host_text(s.kind),
                str(s.port or "-"),
                host_text(s.model or "-"),
                ",".join(map(str, s.gpus)) or "-",
                human_mib(s.memory_mib) if s.memory_mib else "-",
                verdict_text(c, f"{s.host}:{s.port}" in self.checking),
            )
        seats_table = view.query_one("#seats-table", KeyedTable)
        seats_table.sync(rows)
        said_box = view.query_one("#seats-check", Static)
        none = seats_table.none_matched("seat")
        said = Text(none, style="dim") if none else self.last_said
        said_box.display = said is not None
        said_box.update(said or "")
        watch: AlertWatch | None = getattr(view.app, "alert_watch", None)
        floor = (watch.config if watch is not None else AlertConfig()).gpu_headroom_floor_gib * 1024
        bars = Text()
        for h in hosts:
            for room in headroom(h):
                if room.shares:
                    bars.append_text(headroom_bar(h, room.gpu, floor))
                    bars.append("\n")
        why = no_bar_text(hosts)
        if why:
            bars.append(why, style="dim")
        view.query_one("#seats-headroom", Static).update(bars)

    def say(self, text: Text) -> None:
        """Put `text` on the line under the seats table."""
        self.last_said = text
        if self.view.ready:
            self.show()

    def highlighted(self) -> Seat | None:
        """The seat under the seats table's cursor."""
        key = self.view.query_one("#seats-table", KeyedTable).current_key
        return self.seats.get(key) if key is not None else None

    def describe(self) -> None:
        """`d`: the raw facts behind the highlighted seat (tui/modals/describe.py)."""
        app = self.view.app
        seat = self.highlighted()
        if seat is None:
            app.notify(
                "No seat to describe: no host's probe reported a serving seat."
                if not self.seats
                else "No seat highlighted: tab to the seats table and move to one.",
                title="Describe",
                severity="warning",
                markup=False,
            )
            return
        where = f"{seat.host}:{seat.port}"
        check = self.verdicts.get(where) or recorded_checks().get(where)
        app.push_screen(describe_seat(app, seat, check))

    def to_check(self) -> tuple[str, int] | None:
        """`c`: the host and port of the highlighted seat, marked as being checked, for the
        view's `check` worker; None, having said why, when there is none to check or it is
        being checked already."""
        app = self.view.app
        seat = self.highlighted()
        if seat is None:
            why = (
                "No seat to check: no host's probe reported a serving seat."
                if not self.seats
                else "No seat highlighted: tab to the seats table and move to one."
            )
            app.notify(why, title="Seat check", severity="warning")
            self.say(Text(why, style="yellow"))
            return None
        if not seat.port:
            why = (
                f"Seat {shown(seat.name)} on {seat.host} has no port: the probe found none it listens on, "
                "so there is nothing to ask for a completion."
            )
            app.notify(why, title="Seat check", severity="warning", markup=False)
            self.say(Text(why, style="yellow"))
            return None
        where = f"{seat.host}:{seat.port}"
        if where in self.checking:
            app.notify(f"{where} is being checked already.", title="Seat check")
            return None
        self.checking.add(where)
        app.notify(f"{where}: asking for one completion with logprobs...", title="Seat check")
        self.say(
            Text(
                f"checking {shown(seat.name)} on {seat.host} ({where}): one completion with "
                "logprobs, asked from its host...",
                style="dim",
            )
        )
        return seat.host, seat.port

    async def check(self, host: str, port: int) -> None:
        """Check one seat from its host (in the view's `check` worker); the verdict is kept for
        the seat-check rule and shown in its row and the line under the table."""
        app = self.view.app
        where = f"{host}:{port}"
        watch: AlertWatch = app.alert_watch
        try:
            c = await watch.monitor.check_seat(host, port)
        except Exception as e:
            self.checking.discard(where)
            why = getattr(e, "message", None) or str(e) or type(e).__name__
            self.say(message_text(f"seat check {where} could not run: {why}", "bold red"))
            app.report_error(f"seat check {where}", e)
            return
        self.checking.discard(where)
        self.verdicts[where] = c
        if c.sound:
            app.notify(said(c.message), title=f"Seat {where} is sound", markup=False)
            self.say(message_text(f"{where} sound ({c.witness}): {c.message}", "green"))
        else:
            app.bell()
            app.notify(
                said(f"{shown(str(c.signature))}: {c.message}"),
                title=f"Seat {where} FAILED",
                severity="error",
                timeout=15,
                markup=False,
            )
            self.say(
                message_text(f"{where} FAILED {shown(str(c.signature))}: {c.message}", "bold red")
            )
