"""The Alerts view's seats section: the fleet's serving seats and each card's headroom as a
bar with every seat's share (`show_seats`), `c` to check the highlighted seat on its host
(its row reads `checking…` at once, then the verdict, and the line under the table says it in
full) and `d` to describe it. A mixin of `AlertsScreen` (`tui/views/alerts.py`), which holds
the tables and the verdicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.widgets import Static

from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.rules.alerts import AlertConfig
from fleetdeck.backend.monitor.seats import SeatCheck, headroom, host_seats, recorded_checks
from fleetdeck.show.fmt import host_text, human_mib, message_text, said, shown
from fleetdeck.tui.views.seats_panel import headroom_bar, no_bar_text, verdict_text
from fleetdeck.tui.widgets.keyed_table import KeyedTable

if TYPE_CHECKING:
    from fleetdeck.tui.alert_watch import AlertWatch


class SeatsSection:
    """The seats table, the last check's line and the headroom bars of the Alerts view."""

    seats: dict[str, Seat]
    #: the seats (`host:port`) being checked now, and the verdicts this view got, by seat
    checking: set[str]
    verdicts: dict[str, SeatCheck]
    #: the line under the seats table: what the last `c` found, in full
    last_said: Text | None

    def show_seats(self) -> None:
        """The seats table, the last check's line, and one headroom bar per card that holds a
        seat (or why there is none)."""
        checks = {**recorded_checks(), **self.verdicts}
        hosts = [h for n in self.state.host_names if (h := self.state.shown(n)) is not None]
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
        seats_table = self.query_one("#seats-table", KeyedTable)
        seats_table.sync(rows)
        said_box = self.query_one("#seats-check", Static)
        none = seats_table.none_matched("seat")
        said = Text(none, style="dim") if none else self.last_said
        said_box.display = said is not None
        said_box.update(said or "")
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
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
        self.query_one("#seats-headroom", Static).update(bars)

    def _say(self, text: Text) -> None:
        self.last_said = text
        if self.ready:
            self.show_seats()

    def action_describe_seat(self) -> None:
        """`d`: the raw facts behind the highlighted seat (tui/modals/describe.py)."""
        from fleetdeck.tui.modals.describe import describe_seat

        key = self.query_one("#seats-table", KeyedTable).current_key
        seat = self.seats.get(key) if key is not None else None
        if seat is None:
            self.app.notify(
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
        self.app.push_screen(describe_seat(self.app, seat, check))

    def action_check_seat(self) -> None:
        key = self.query_one("#seats-table", KeyedTable).current_key
        seat = self.seats.get(key) if key is not None else None
        if seat is None:
            why = (
                "No seat to check: no host's probe reported a serving seat."
                if not self.seats
                else "No seat highlighted: tab to the seats table and move to one."
            )
            self.app.notify(why, title="Seat check", severity="warning")
            self._say(Text(why, style="yellow"))
            return
        if not seat.port:
            why = (
                f"Seat {shown(seat.name)} on {seat.host} has no port: the probe found none it listens on, "
                "so there is nothing to ask for a completion."
            )
            self.app.notify(why, title="Seat check", severity="warning", markup=False)
            self._say(Text(why, style="yellow"))
            return
        where = f"{seat.host}:{seat.port}"
        if where in self.checking:
            self.app.notify(f"{where} is being checked already.", title="Seat check")
            return
        self.checking.add(where)
        self.app.notify(f"{where}: asking for one completion with logprobs...", title="Seat check")
        self._say(
            Text(
                f"checking {shown(seat.name)} on {seat.host} ({where}): one completion with "
                "logprobs, asked from its host...",
                style="dim",
            )
        )
        self.check(seat.host, seat.port)

    @work(group="seat-check", exit_on_error=False)
    async def check(self, host: str, port: int) -> None:
        """Check one seat from its host; the verdict is kept for the seat-check rule and shown
        in its row and the line under the table."""
        where = f"{host}:{port}"
        watch: AlertWatch = self.app.alert_watch
        try:
            c = await watch.monitor.check_seat(host, port)
        except Exception as e:
            self.checking.discard(where)
            why = getattr(e, "message", None) or str(e) or type(e).__name__
            self._say(message_text(f"seat check {where} could not run: {why}", "bold red"))
            self.app.report_error(f"seat check {where}", e)
            return
        self.checking.discard(where)
        self.verdicts[where] = c
        if c.sound:
            self.app.notify(said(c.message), title=f"Seat {where} is sound", markup=False)
            self._say(message_text(f"{where} sound ({c.witness}): {c.message}", "green"))
        else:
            self.app.bell()
            self.app.notify(
                said(f"{shown(str(c.signature))}: {c.message}"),
                title=f"Seat {where} FAILED",
                severity="error",
                timeout=15,
                markup=False,
            )
            self._say(
                message_text(f"{where} FAILED {shown(str(c.signature))}: {c.message}", "bold red")
            )
