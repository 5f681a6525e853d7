"""What the web view shows: the monitor's last poll, its alerts and the notices a silence holds,
kept by `watch` itself (the web view is fed by the one poller, never a second one).

`update` is called by the monitor after each poll, in its own loop (as the Prometheus
collector is); the server's threads read `latest()` and wait for the next one with
`wait_newer`. A page is drawn once per poll and view, when the first reader asks for it, and
every reader of that view gets the same bytes (`drawn`): ten open pages cost one drawing.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.monitor.silences import SilenceStore

#: drawings kept per poll (views and runs asked for); the oldest goes first
DRAWN_MAX = 64


@dataclass(frozen=True)
class Seen:
    """One poll as the pages read it."""

    version: int = 0
    snap: FleetSnapshot | None = None
    #: every alert the engine holds: firing by severity, then the recently resolved
    alerts: tuple[Any, ...] = ()
    #: notices a silence holds back: (alert as delivered, until when)
    held: tuple[tuple[Mapping[str, Any], float], ...] = ()
    #: the silences in force when it was drawn, and the one over each firing alert's key
    silences: tuple[Any, ...] = ()
    silenced: Mapping[str, Any] = field(default_factory=dict)
    time: float = 0.0


class ViewState:
    """The monitor's side (`update`, as a collector) and the server's (`latest`, `wait_newer`,
    `drawn`). `alerts` and `held` are read in the monitor's loop at each update."""

    def __init__(
        self,
        alerts: Callable[[], list[Any]] | None = None,
        held: Callable[[], list[tuple[Mapping[str, Any], float]]] | None = None,
        silences: SilenceStore | None = None,
    ) -> None:
        self.alerts = alerts
        self.held = held
        self._silences = silences or SilenceStore()
        self._cond = threading.Condition()
        self._seen = Seen()
        self._drawn: OrderedDict[tuple[int, str], bytes] = OrderedDict()
        #: drawings made (benchmarks: one per poll and view, whatever the readers)
        self.drawings = 0

    def update(self, snap: FleetSnapshot, firing: list[Any], checks: Mapping[str, Any]) -> None:
        """A poll ended (the monitor's collector call): what the pages show from now on."""
        alerts = tuple(self.alerts() if self.alerts is not None else firing)
        held = tuple(self.held() if self.held is not None else ())
        now = time.time()
        self._silences.refresh()
        active = tuple(self._silences.active(now))
        silenced = {
            a.key: s
            for a in alerts
            if a.state == "firing" and (s := self._silences.of(a, now)) is not None
        }
        with self._cond:
            self._seen = Seen(
                self._seen.version + 1, snap, alerts, held, active, silenced, snap.time or now
            )
            self._cond.notify_all()

    def latest(self) -> Seen:
        with self._cond:
            return self._seen

    def wait_newer(self, version: int, timeout: float) -> Seen:
        """The first poll after `version`, or the latest one when `timeout` passes first."""
        with self._cond:
            self._cond.wait_for(lambda: self._seen.version > version, timeout)
            return self._seen

    def drawn(self, seen: Seen, key: str, draw: Callable[[Seen], bytes]) -> bytes:
        """`draw(seen)` for the view `key`, drawn once per poll whoever asks."""
        k = (seen.version, key)
        with self._cond:
            got = self._drawn.get(k)
        if got is not None:
            return got
        out = draw(seen)
        with self._cond:
            if k not in self._drawn:
                self.drawings += 1
            self._drawn[k] = out
            self._drawn.move_to_end(k)
            while len(self._drawn) > DRAWN_MAX:
                self._drawn.popitem(last=False)
        return out


class Both:
    """Two collectors fed by one monitor (the Prometheus exporter and the web view)."""

    def __init__(self, *collectors: Any) -> None:
        self.collectors = [c for c in collectors if c is not None]

    def update(self, snap: FleetSnapshot, firing: list[Any], checks: Mapping[str, Any]) -> None:
        for c in self.collectors:
            c.update(snap, firing, checks)


__all__ = ["Both", "DRAWN_MAX", "Seen", "ViewState"]
