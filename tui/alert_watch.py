"""The dashboard's side of the monitor: the rules judged on every live poll by the same service
`fleetdeck watch` runs (`backend/monitor/service.py`, role `observe`), the terminal bell and a
toast when one starts firing, a badge in the header while any fire (the Alerts view shows them:
`tui/views/alerts.py`).

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
from typing import Any, Protocol

from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen

from fleetdeck.backend.fleet.config import Fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.monitor.delivery.watch_lock import running_watch
from fleetdeck.backend.monitor.history.store import History
from fleetdeck.backend.monitor.rules.alerts import Alert, AlertConfig
from fleetdeck.backend.monitor.seats import recorded_checks
from fleetdeck.backend.monitor.service import Monitor
from fleetdeck.backend.monitor.silence_model import Silence
from fleetdeck.backend.monitor.silences import SilenceStore
from fleetdeck.show.cells import spark_char
from fleetdeck.show.fmt import said
from fleetdeck.tui.fleet_state import HISTORY, FleetState
from fleetdeck.tui.sources import Source

#: toasts held while a pop-up is open, at most (the newest)
HELD_TOASTS = 5


def badge_text(firing: int, on_alerts_view: bool = False) -> str:
    """The header's alert badge: how many fire and, off the Alerts view, the key that shows them
    ("" when none)."""
    if not firing:
        return ""
    return f"⚠ {firing} alert{'' if firing == 1 else 's'}" + (
        "" if on_alerts_view else " (press 5)"
    )


class WatchedApp(Protocol):
    """What the alert watch asks of the dashboard it watches for (`FleetdeckApp` is one): the
    fleet and its poll source, the fleet state its sparklines fill, and the screen stack, header
    and toasts it shows its verdict in. A protocol, so that this module imports nothing of the
    app, which imports it."""

    fleet: Fleet
    source: Source
    state: FleetState
    sub_title: str

    def link(self, host: str) -> HostLink: ...

    @property
    def screen_stack(self) -> list[Screen[Any]]: ...

    @property
    def screen(self) -> Screen[object]: ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...

    def bell(self) -> None: ...


class AlertWatch:
    """The dashboard's monitor (role `observe`): `observe(snapshot)` after each poll renders
    its verdict as the bell, toasts and the header badge."""

    def __init__(self, app: WatchedApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled
        self.config: AlertConfig = app.fleet.alerts or AlertConfig()  # type: ignore[assignment]
        self.monitor = Monitor(
            app.fleet,
            role="observe",
            source=app.source,
            report=self._said,
            link=app.link,
            history=History(retention_days=self.config.history_retention_days),
        )
        self.history: History | None = self.monitor.history
        self._first = True
        self._base_subtitle: str | None = None
        #: toasts waiting for a pop-up to close (the newest HELD_TOASTS)
        self.held: list[tuple[str, dict]] = []
        #: the silences as saved (read again when the file changes)
        self.silences = SilenceStore(
            warn=lambda w: self.toast(said(w), title="Silences", severity="warning", markup=False)
        )

    @property
    def engine(self):
        return self.monitor.engine

    @property
    def firing(self) -> list[Alert]:
        return self.monitor.firing()

    def alerts(self) -> list[Alert]:
        """Firing first, then the recently resolved, newest first."""
        return self.monitor.alerts()

    def silence_of(self, a: Alert, read: bool = True) -> Silence | None:
        """The silence in force over firing alert `a` (None for a resolved one); `read`: look
        at the silences' file first (False where the caller just did, for a list of alerts: a
        look is a `stat`, and each poll asked once per alert, four times over)."""
        if a.state != "firing":
            return None
        if read:
            self.silences.refresh()
        return self.silences.of(a)  # silences are kept in real time, whatever clock the view shows

    def unsilenced(self) -> list[Alert]:
        """The firing alerts no silence holds (what the badge counts)."""
        self.silences.refresh()
        return [a for a in self.firing if self.silence_of(a, read=False) is None]

    def delivery(self) -> str | None:
        """Who delivers the `[alerts]` hooks, in one sentence (None when none are configured)."""
        if not (self.config.on_alert or self.config.webhook):
            return None
        w = running_watch()
        if w is None:
            return (
                "Hooks: no fleetdeck watch runs on this state folder, so no hook is delivered "
                "(the dashboard never delivers; start watch, e.g. as the systemd unit)."
            )
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
        # (a silenced one is not delivered: neither rung nor toasted)
        self.silences.refresh()
        fired = [
            a
            for a in transitions
            if a.state == "firing"
            and a.severity == "critical"
            and self.silence_of(a, read=False) is None
        ]
        if fired:
            self.app.bell()
            if first and len(fired) > 1:
                # at start everything already wrong "starts firing": one toast, not a wall of them
                # covering the screen the operator has just opened (at 80x24, all of it)
                rules = sorted({a.rule for a in fired})
                self.toast(
                    f"{len(fired)} critical alerts firing ({', '.join(rules)}): press 5 to see them.",
                    title="Alerts",
                    severity="error",
                    timeout=10,
                )
            else:
                for a in fired[:2]:
                    self.toast(
                        said(a.text),
                        title=said(a.title),
                        severity="error",
                        timeout=10,
                        markup=False,
                    )
                if len(fired) > 2:
                    self.toast(
                        f"and {len(fired) - 2} more critical: press 5",
                        title="Alerts",
                        severity="error",
                    )
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
            for path, pts in self.history.series(
                h.name, "disk", since - self.config.disk_rate_window
            ).items():
                for t, used, free in pts:
                    if used is not None and free is not None:
                        self.engine.add_disk_sample(h.name, path, t, int(used), int(free))
            used_by_gpu = self.history.gpu_memory(h.name, since)
            for g in h.gpus:
                used_mib = list(used_by_gpu.get(g.index, ()))[-(HISTORY - 1) :]
                if not used_mib or not g.memory_total_mib:
                    continue
                fracs = [min(1.0, p / g.memory_total_mib) for p in used_mib]
                key = (h.name, g.index)
                if key in state.history and len(state.history[key]) + len(fracs) <= HISTORY:
                    state.history[key].extendleft(reversed(fracs))
                    state.spark[key].extendleft(reversed([spark_char(f) for f in fracs]))

    def show_badge(self) -> None:
        """`⚠ N alerts (press 5)` before the header's subtitle while any fire (first, so a narrow
        terminal cuts the fleet's description, not the badge)."""
        if self._base_subtitle is None:
            self._base_subtitle = self.app.sub_title
        n = len(self.unsilenced())
        badge = badge_text(n, getattr(self.app.screen, "SHOWS_ALERTS", False))
        self.app.sub_title = f"{badge} · {self._base_subtitle}" if badge else self._base_subtitle
