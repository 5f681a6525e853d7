"""The Alerts view (`5`): the alerts the dashboard's monitor judges (`tui/alert_watch.py`: the
bell, the toasts and the header's badge), firing first, the highlighted one in full below.

Below the alerts, the fleet's serving seats and each card's headroom as a bar with every
seat's share; `c` runs `seats check` on the highlighted seat (on its host, against 127.0.0.1):
its row reads `checking…` at once, then the verdict (a sound one with its witness, the tokens
and logprobs it judged), and the line under the table says it in full, kept in the view even
when the verdict file cannot be written. With seats but no bar, the line says why no card
lists their memory.

Silences (`backend/monitor/silences.py`): `s` opens a pop-up prefilled from the highlighted
alert (`tui/modals/silence.py`), `e` expires the highlighted silence (of the silences table,
else the one over the highlighted alert). A silenced alert stays in the table, its state
`silenced` and its text saying by whom and until when; it neither rings nor toasts, and the
header's badge does not count it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from fleetdeck.backend.actions.audit import AuditError
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.alerts import Alert, AlertConfig
from fleetdeck.backend.monitor.seats import SeatCheck, headroom, host_seats, recorded_checks
from fleetdeck.backend.monitor.silences import Silence, SilenceRefused, expire_silence
from fleetdeck.show.fmt import (
    alerts_title,
    host_text,
    human_mib,
    message_text,
    said,
    severity_text,
    shown,
    since_text,
)
from fleetdeck.tui.views.base import ViewScreen, show_text
from fleetdeck.tui.views.seats_panel import headroom_bar, no_bar_text, verdict_text
from fleetdeck.tui.widgets.keyed_table import KeyedTable

if TYPE_CHECKING:
    from fleetdeck.tui.alert_watch import AlertWatch

STATE_STYLE = {"firing": "bold red", "resolved": "green"}


class AlertsScreen(ViewScreen):
    """Every firing alert, then the recently resolved; the highlighted one in full below; the
    seats and each card's headroom under them."""

    SHOWS_AGES = True
    SHOWS_ALERTS = True
    BINDINGS = [
        Binding(
            "c",
            "check_seat",
            "Check seat",
            tooltip="seats check on the highlighted seat: one completion with logprobs, "
            "sent from its host",
        ),
        Binding(
            "s",
            "silence",
            "Silence",
            tooltip="silence alerts like the highlighted one for a while (host, rule, subject, "
            "how long, why): they still show, marked, but no hook hears of them",
        ),
        # in the help screen (?) and the silences line, not the footer: 80 columns hold no more
        Binding(
            "d",
            "describe_seat",
            "Describe",
            show=False,
            tooltip="describe the highlighted seat: its whole command line and flags, the endpoint, "
            "the last check, escaped (y copies)",
        ),
        Binding(
            "e",
            "expire_silence",
            "Expire",
            show=False,
            tooltip="end the highlighted silence now (the silences table's, else the one over "
            "the highlighted alert): what it held is delivered",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.shown: dict[str, Alert] = {}
        self.seats: dict[str, Seat] = {}
        #: the seats (`host:port`) being checked now, and the verdicts this view got, by seat
        self.checking: set[str] = set()
        self.verdicts: dict[str, SeatCheck] = {}
        #: the line under the seats table: what the last `c` found, in full
        self.last_said: Text | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="alerts-title", classes="section")
        yield KeyedTable(
            [
                ("state", "State"),
                ("severity", "Severity"),
                ("rule", "Rule"),
                ("host", "Host"),
                ("subject", "Subject"),
                ("since", "Since"),
                ("text", "What"),
            ],
            id="alerts-table",
            column_sort=True,
        )
        yield Static(id="alerts-detail", classes="detail")
        yield Static(id="silences-title", classes="section")
        yield KeyedTable(
            [
                ("id", "Silence"),
                ("scope", "Silences"),
                ("until", "Until"),
                ("by", "By"),
                ("comment", "Why"),
            ],
            id="silences-table",
            classes="auto",
            column_sort=True,
        )
        yield Static("Seats and card headroom (c: check the highlighted seat)", classes="section")
        yield KeyedTable(
            [
                ("host", "Host"),
                ("seat", "Seat"),
                ("kind", "Kind"),
                ("port", "Port"),
                ("model", "Model"),
                ("gpus", "GPUs"),
                ("memory", "Memory"),
                ("check", "Last check"),
            ],
            id="seats-table",
            classes="auto",
            column_sort=True,
        )
        yield Static(id="seats-check", classes="detail")
        yield Static(id="seats-headroom", classes="detail")

    def refresh_view(self) -> None:
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        alerts = watch.alerts() if watch is not None else []
        now = self.app.clock()
        # firing by severity (critical first), then newest first; then the resolved, newest first
        self.shown = {f"{a.state}|{a.key}|{a.since}": a for a in alerts}
        rows = {}
        held = 0
        for k, a in self.shown.items():
            s = watch.silence_of(a) if watch is not None else None
            held += s is not None
            state = (
                Text("silenced", style="yellow")
                if s
                else Text(a.state, style=STATE_STYLE.get(a.state, ""))
            )
            what = (f"silenced by {shown(s.by)} until {_hhmm(s.ends)}: " if s else "") + a.text
            rows[k] = (
                state,
                severity_text(a.severity if a.state == "firing" else ""),
                a.rule,
                a.host,
                host_text(a.subject),
                since_text(a.since, now),
                message_text(what[:120]),
            )
        show_text(
            self.query_one("#alerts-title", Static),
            alerts_title(alerts) + (f" ({held} silenced)" if held else ""),
        )
        self.query_one("#alerts-table", KeyedTable).sync(rows)
        if watch is not None:
            watch.show_badge()  # a silence added or expired here changes what it counts
        self.show_detail()
        self.show_silences()
        self.show_seats()

    def show_silences(self) -> None:
        """The silences in force, ending soonest first (hidden when there is none)."""
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        active: list[Silence] = []
        if watch is not None:
            watch.silences.refresh()
            active = watch.silences.active()
        rows = {
            s.id: (
                s.id,
                host_text(s.scope),
                _hhmm(s.ends),
                host_text(s.by),
                message_text(s.comment[:80]),
            )
            for s in active
        }
        table = self.query_one("#silences-table", KeyedTable)
        table.sync(rows)
        table.display = bool(rows)
        none = table.none_matched("silence")
        show_text(
            self.query_one("#silences-title", Static),
            none
            if none
            else f"Silences: {len(rows)} in force (s: silence alerts like the highlighted one, e: expire the "
            "highlighted silence)"
            if rows
            else "No silences (s: silence alerts like the highlighted one)",
        )

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

    def show_detail(self) -> None:
        """The highlighted alert in full."""
        key = self.query_one("#alerts-table", KeyedTable).current_key
        detail = self.query_one("#alerts-detail", Static)
        a = self.shown.get(key) if key is not None else None
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        who = watch.delivery() if watch is not None else None
        none = self.query_one("#alerts-table", KeyedTable).none_matched("alert")
        if a is None and none:
            text = Text(none, style="dim")
        elif a is None:
            text = Text(
                "No alerts. Rules and thresholds: the [alerts] table of the fleet file.",
                style="dim",
            )
        else:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.since))
            text = message_text(
                f"{a.title}\n{a.state} since {when}"
                + (f", {a.severity}" if a.state == "firing" else "")
                + f"\n\n{a.text}"
            )
            s = watch.silence_of(a) if watch is not None else None
            if s is not None:
                text.append_text(
                    message_text(
                        f"\nSilenced by {shown(s.by)} until {time.strftime('%Y-%m-%d %H:%M', time.localtime(s.ends))} "
                        f"({s.id}, {s.scope}): {s.comment}. No hook hears of it until then (e ends it now).",
                        "yellow",
                    )
                )
        if who:
            text.append(f"\n{who}", style="dim")
        detail.update(text)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def on_keyed_table_choice_changed(self, event: KeyedTable.ChoiceChanged) -> None:
        # a filter that lets no row through moves no cursor: the lines under the tables say it
        if event.table.id == "alerts-table":
            self.show_detail()
        elif event.table.id == "silences-table":
            self.show_silences()
        elif event.table.id == "seats-table":
            self.show_seats()

    # -- silences ---------------------------------------------------------------------------------
    def highlighted(self) -> Alert | None:
        key = self.query_one("#alerts-table", KeyedTable).current_key
        return self.shown.get(key) if key is not None else None

    def action_silence(self) -> None:
        """`s`: the silence pop-up, prefilled from the highlighted alert."""
        from fleetdeck.tui.modals.silence import SilenceModal

        a = self.highlighted()
        modal = SilenceModal(a.host, a.rule, a.subject) if a is not None else SilenceModal()
        self.app.push_screen(modal, callback=self._silenced)

    def _silenced(self, s: Silence | None) -> None:
        if s is None:
            return
        self.app.notify(
            said(f"{s.scope} until {_hhmm(s.ends)}: {s.comment}"),
            title=f"Silenced ({s.id})",
            markup=False,
        )
        self.refresh_view()

    def action_expire_silence(self) -> None:
        """`e`: end the highlighted silence now (the silences table's when it has the focus, else
        the one over the highlighted alert, else the silences table's highlighted row)."""
        table = self.query_one("#silences-table", KeyedTable)
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        a = self.highlighted()
        over = watch.silence_of(a) if watch is not None and a is not None else None
        sid = table.current_key if self.focused is table or over is None else over.id
        if sid is None:
            self.app.notify(
                "No silence to expire: none is in force.", title="Silences", severity="warning"
            )
            return
        try:
            s = expire_silence(sid)
        except (SilenceRefused, AuditError) as e:
            self.app.notify(
                said(getattr(e, "message", None) or str(e)),
                title="Not expired",
                severity="warning",
                markup=False,
            )
            return
        self.app.notify(
            said(f"{s.scope}: what it held is delivered by the running watch."),
            title=f"Expired {s.id}",
            markup=False,
        )
        self.refresh_view()

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


def _hhmm(t: float) -> str:
    return time.strftime(
        "%H:%M" if abs(time.time() - t) < 20 * 3600 else "%Y-%m-%d %H:%M", time.localtime(t)
    )
