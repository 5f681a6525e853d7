"""The Alerts view (`5`), and the dashboard's side of the monitor: the rules judged on every
live poll by the same service `fleetdeck watch` runs (`backend/monitor/service.py`, role `observe`),
the terminal bell and a toast when one starts firing, a badge in the header while any fire.

Below the alerts, the fleet's serving seats and each card's headroom as a bar with every
seat's share; `c` runs `seats check` on the highlighted seat (on its host, against 127.0.0.1):
its row reads `checking…` at once, then the verdict (a sound one with its witness, the tokens
and logprobs it judged), and the line under the table says it in full, kept in the view even
when the verdict file cannot be written. With seats but no bar, the line says why no card
lists their memory.

The dashboard carries on from the alert state `watch` saves (so `since` agrees) but delivers
no hook and saves no alert state: the one deliverer is the `watch` holding the state folder's
lock, and the view says whether one is running. It does write history (a minute's row is keyed
by minute and series, so the dashboard and a watcher writing the same minute leave one row),
and on its first poll it fills each GPU sparkline with the last hour from history, one point a
minute. A recorded replay (tests, screenshots) is not judged and not recorded unless asked for
(`AlertWatch.enabled`), since its times are not now.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.alerts import Alert, AlertConfig
from fleetdeck.backend.monitor.history import History
from fleetdeck.backend.monitor.seats import SeatCheck, headroom, host_seats, recorded_checks
from fleetdeck.backend.monitor.service import Monitor
from fleetdeck.backend.monitor.watch_lock import running_watch
from fleetdeck.tui.cells import spark_char
from fleetdeck.tui.fleet_state import HISTORY
from fleetdeck.tui.fmt import (
    alerts_title,
    host_text,
    human_mib,
    message_text,
    said,
    severity_text,
    shown,
    since_text,
)
from fleetdeck.tui.screens.base import ViewScreen, show_text
from fleetdeck.tui.widgets.keyed_table import KeyedTable

if TYPE_CHECKING:
    from fleetdeck.tui.app import FleetdeckApp

STATE_STYLE = {"firing": "bold red", "resolved": "green"}
SHARE_STYLES = ("cyan", "magenta", "yellow", "blue", "green")
#: toasts held while a pop-up is open, at most (the newest)
HELD_TOASTS = 5
BAR = 40


def badge_text(firing: int, on_alerts_view: bool = False) -> str:
    """The header's alert badge: how many fire and, off the Alerts view, the key that shows them
    ("" when none)."""
    if not firing:
        return ""
    return f"⚠ {firing} alert{'' if firing == 1 else 's'}" + ("" if on_alerts_view else " (press 5)")


class AlertWatch:
    """The dashboard's monitor (role `observe`): `observe(snapshot)` after each poll renders
    its verdict as the bell, toasts and the header badge."""

    def __init__(self, app: FleetdeckApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled
        self.config: AlertConfig = app.fleet.alerts or AlertConfig()  # type: ignore[assignment]
        self.monitor = Monitor(app.fleet, role="observe", source=app.source, report=self._said, link=app.link,
                               history=History(retention_days=self.config.history_retention_days))
        self.history: History | None = self.monitor.history
        self._first = True
        self._base_subtitle: str | None = None
        #: toasts waiting for a pop-up to close (the newest HELD_TOASTS)
        self.held: list[tuple[str, dict]] = []

    @property
    def engine(self):
        return self.monitor.engine

    @property
    def firing(self) -> list[Alert]:
        return self.monitor.firing()

    def alerts(self) -> list[Alert]:
        """Firing first, then the recently resolved, newest first."""
        return self.monitor.alerts()

    def delivery(self) -> str | None:
        """Who delivers the `[alerts]` hooks, in one sentence (None when none are configured)."""
        if not (self.config.on_alert or self.config.webhook):
            return None
        w = running_watch()
        if w is None:
            return ("Hooks: no fleetdeck watch runs on this state folder, so no hook is delivered "
                    "(the dashboard never delivers; start watch, e.g. as the systemd unit).")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(w.get("started") or 0))
        return f"Hooks: delivered by fleetdeck watch (pid {w.get('pid')}, since {when}), once per transition."

    def _said(self, kind: str, line: str) -> None:
        if kind == "warning":
            self.toast(said(line), title="Monitor", severity="warning", markup=False)

    # -- toasts: never over a pop-up ---------------------------------------------------------
    def _popup_open(self) -> bool:
        return any(isinstance(s, ModalScreen) for s in self.app.screen_stack)

    def toast(self, message: str, **kw) -> None:
        """A toast now, or, while a pop-up is open, once it closes (it would cover the fields
        the operator is typing in)."""
        if self._popup_open():
            self.held.append((message, kw))
            del self.held[:-HELD_TOASTS]
            return
        self.app.notify(message, **kw)

    def flush_toasts(self) -> None:
        """Show the toasts held while a pop-up was open, once none is."""
        if not self.held or self._popup_open():
            return
        held, self.held = self.held, []
        for message, kw in held:
            self.app.notify(message, **kw)

    def close(self) -> None:
        """Write the history rows folded so far."""
        if self.history is not None:
            self.history.close()

    def observe(self, snap: FleetSnapshot) -> list[Alert]:
        """Judge the rules on one poll; ring and toast for each alert that starts firing."""
        if not self.enabled:
            return []
        first, self._first = self._first, False
        if first:
            self._prefill(snap)
        transitions = self.monitor.after_poll(snap, recorded_checks())
        # only a critical alert rings and pops up; the others are in the view and the badge
        fired = [a for a in transitions if a.state == "firing" and a.severity == "critical"]
        if fired:
            self.app.bell()
            if first and len(fired) > 1:
                # at start everything already wrong "starts firing": one toast, not a wall of them
                # covering the screen the operator has just opened (at 80x24, all of it)
                rules = sorted({a.rule for a in fired})
                self.toast(f"{len(fired)} critical alerts firing ({', '.join(rules)}): press 5 to see them.",
                           title="Alerts", severity="error", timeout=10)
            else:
                for a in fired[:2]:
                    self.toast(said(a.text), title=said(a.title), severity="error", timeout=10, markup=False)
                if len(fired) > 2:
                    self.toast(f"and {len(fired) - 2} more critical: press 5", title="Alerts", severity="error")
        self.flush_toasts()
        self.show_badge()
        return transitions

    def _prefill(self, snap: FleetSnapshot) -> None:
        """GPU sparklines and the disk-rate window from the last hour of history."""
        assert self.history is not None
        since = (snap.time or time.time()) - 3600
        state = self.app.state
        for h in snap.hosts:
            if not h.reachable:
                continue
            for path, pts in self.history.series(h.name, "disk", since - self.config.disk_rate_window).items():
                for t, used, free in pts:
                    if used is not None and free is not None:
                        self.engine.add_disk_sample(h.name, path, t, int(used), int(free))
            used_by_gpu = self.history.gpu_memory(h.name, since)
            for g in h.gpus:
                pts = list(used_by_gpu.get(g.index, ()))[-(HISTORY - 1):]
                if not pts or not g.memory_total_mib:
                    continue
                fracs = [min(1.0, p / g.memory_total_mib) for p in pts]
                key = (h.name, g.index)
                if key in state.history and len(state.history[key]) + len(fracs) <= HISTORY:
                    state.history[key].extendleft(reversed(fracs))
                    state.spark[key].extendleft(reversed([spark_char(f) for f in fracs]))

    def show_badge(self) -> None:
        """`⚠ N alerts (press 5)` before the header's subtitle while any fire (first, so a narrow
        terminal cuts the fleet's description, not the badge)."""
        if self._base_subtitle is None:
            self._base_subtitle = self.app.sub_title
        n = len(self.monitor.engine.m.firing)
        badge = badge_text(n, isinstance(self.app.screen, AlertsScreen))
        self.app.sub_title = f"{badge} · {self._base_subtitle}" if badge else self._base_subtitle


class AlertsScreen(ViewScreen):
    """Every firing alert, then the recently resolved; the highlighted one in full below; the
    seats and each card's headroom under them."""

    SHOWS_AGES = True
    BINDINGS = [Binding("c", "check_seat", "Check seat",
                        tooltip="seats check on the highlighted seat: one completion with logprobs, "
                        "sent from its host")]

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
        yield KeyedTable([("state", "State"), ("severity", "Severity"), ("rule", "Rule"), ("host", "Host"),
                          ("subject", "Subject"), ("since", "Since"), ("text", "What")], id="alerts-table")
        yield Static(id="alerts-detail", classes="detail")
        yield Static("Seats and card headroom (c: check the highlighted seat)", classes="section")
        yield KeyedTable([("host", "Host"), ("seat", "Seat"), ("kind", "Kind"), ("port", "Port"),
                          ("model", "Model"), ("gpus", "GPUs"), ("memory", "Memory"), ("check", "Last check")],
                         id="seats-table", classes="auto")
        yield Static(id="seats-check", classes="detail")
        yield Static(id="seats-headroom", classes="detail")

    def refresh_view(self) -> None:
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        alerts = watch.alerts() if watch is not None else []
        now = self.app.clock()
        # firing by severity (critical first), then newest first; then the resolved, newest first
        self.shown = {f"{a.state}|{a.key}|{a.since}": a for a in alerts}
        rows = {k: (Text(a.state, style=STATE_STYLE.get(a.state, "")),
                    severity_text(a.severity if a.state == "firing" else ""), a.rule, a.host,
                    host_text(a.subject), since_text(a.since, now), message_text(a.text[:120]))
                for k, a in self.shown.items()}
        show_text(self.query_one("#alerts-title", Static), alerts_title(alerts))
        self.query_one("#alerts-table", KeyedTable).sync(rows)
        self.show_detail()
        self.show_seats()

    def show_seats(self) -> None:
        """The seats table, the last check's line, and one headroom bar per card that holds a
        seat (or why there is none)."""
        checks = {**recorded_checks(), **self.verdicts}
        hosts = [h for n in self.state.host_names if (h := self.state.shown(n)) is not None]
        self.seats = {s.key: s for h in hosts for s in host_seats(h)}
        rows = {}
        for key, s in self.seats.items():
            c = checks.get(f"{s.host}:{s.port}")
            rows[key] = (s.host, host_text(s.name), host_text(s.kind), str(s.port or "-"), host_text(s.model or "-"),
                         ",".join(map(str, s.gpus)) or "-", human_mib(s.memory_mib) if s.memory_mib else "-",
                         verdict_text(c, f"{s.host}:{s.port}" in self.checking))
        self.query_one("#seats-table", KeyedTable).sync(rows)
        said_box = self.query_one("#seats-check", Static)
        said_box.display = self.last_said is not None
        said_box.update(self.last_said or "")
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
        if a is None:
            text = Text("No alerts. Rules and thresholds: the [alerts] table of the fleet file.", style="dim")
        else:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.since))
            text = message_text(f"{a.title}\n{a.state} since {when}"
                                + (f", {a.severity}" if a.state == "firing" else "") + f"\n\n{a.text}")
        if who:
            text.append(f"\n{who}", style="dim")
        detail.update(text)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def _say(self, text: Text) -> None:
        self.last_said = text
        if self.ready:
            self.show_seats()

    def action_check_seat(self) -> None:
        key = self.query_one("#seats-table", KeyedTable).current_key
        seat = self.seats.get(key) if key is not None else None
        if seat is None:
            why = ("No seat to check: no host's probe reported a serving seat." if not self.seats else
                   "No seat highlighted: tab to the seats table and move to one.")
            self.app.notify(why, title="Seat check", severity="warning")
            self._say(Text(why, style="yellow"))
            return
        if not seat.port:
            why = (f"Seat {shown(seat.name)} on {seat.host} has no port: the probe found none it listens on, "
                   "so there is nothing to ask for a completion.")
            self.app.notify(why, title="Seat check", severity="warning", markup=False)
            self._say(Text(why, style="yellow"))
            return
        where = f"{seat.host}:{seat.port}"
        if where in self.checking:
            self.app.notify(f"{where} is being checked already.", title="Seat check")
            return
        self.checking.add(where)
        self.app.notify(f"{where}: asking for one completion with logprobs...", title="Seat check")
        self._say(Text(f"checking {shown(seat.name)} on {seat.host} ({where}): one completion with "
                       "logprobs, asked from its host...", style="dim"))
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
            self.app.notify(said(f"{shown(str(c.signature))}: {c.message}"), title=f"Seat {where} FAILED",
                            severity="error", timeout=15, markup=False)
            self._say(message_text(f"{where} FAILED {shown(str(c.signature))}: {c.message}", "bold red"))


def verdict_text(c: SeatCheck | None, checking: bool = False) -> Text:
    """A seat's Last check cell: `checking…`, `-` (never checked), `sound · 8 tok` (with the
    tokens it rests on) or the failure signature."""
    if checking:
        return Text("checking…", style="yellow")
    if c is None:
        return Text("-", style="dim")
    if c.sound:
        return Text(f"sound · {c.completion_tokens or 0} tok", style="green")
    return host_text(str(c.signature), "bold red")


def no_bar_text(hosts: list[HostSnapshot]) -> str:
    """Why a host's seats have no headroom bar, one sentence per host ("" when every seat has
    one); "No serving seats seen." only when no host reported a seat."""
    seated = [(h, host_seats(h)) for h in hosts]
    seated = [(h, seats) for h, seats in seated if seats]
    if not seated:
        return "No serving seats seen: no host's probe reported one."
    out = []
    for h, seats in seated:
        bare = [s for s in seats if not s.memory_by_gpu]
        if not bare:
            continue
        n = f"{len(bare)} seat{'' if len(bare) == 1 else 's'} on {h.name}"
        if not h.gpus:
            why = "the host reports no GPU"
        elif all(g.unified_memory for g in h.gpus):
            why = "its memory is unified, so the driver lists no per-process figures"
        elif not any(g.processes for g in h.gpus):
            why = "the driver lists no process on any card (a seat in a container's pid namespace is not listed)"
        else:
            why = ("no process the driver lists on a card belongs to a seat's process tree (a seat in a "
                   "container's pid namespace is counted in the card's used memory, not listed)")
        out.append(f"{n} hold no memory the cards list, so no headroom bar: {why}.")
    return "\n".join(out)


def headroom_bar(host: HostSnapshot, gpu: int, floor_mib: float = 6 * 1024) -> Text:
    """`host GPUn ███▓▓▓░░ free` with each seat's share in its own colour, other holders grey,
    the free part empty, and the free figure red under the `[alerts]` floor."""
    room = next(r for r in headroom(host) if r.gpu == gpu)
    total = room.total_mib or 1.0
    t = Text(f"{host.name} GPU{gpu} ")
    used_cells = 0
    legend = []
    for i, (name, mib) in enumerate(room.shares):
        cells = round(BAR * mib / total)
        style = SHARE_STYLES[i % len(SHARE_STYLES)]
        t.append("█" * cells, style=style)
        used_cells += cells
        legend.append(Text(f" {shown(name)} {human_mib(mib)}", style=style))
    other = max(0, round(BAR * room.held_mib / total) - used_cells)
    t.append("█" * min(other, BAR - used_cells), style="grey50")
    t.append("░" * max(0, BAR - used_cells - other), style="dim")
    t.append(f" {human_mib(room.free_mib)} free of {human_mib(room.total_mib)}",
             style="bold red" if room.free_mib < floor_mib else "")
    for part in legend:
        t.append_text(part)
    return t
