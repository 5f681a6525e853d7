"""The dashboard's memory of the fleet across polls: the latest snapshot, the last good one
per host, down-since, and GPU memory history. Fed only by `apply(snapshot)`; views read it and
never talk to hosts."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run, Schedule
from fleetdeck.backend.fleet.run_order import RunOrder
from fleetdeck.show.cells import spark_char

HISTORY = 60  # samples of GPU memory kept per GPU (5 minutes at the default 5 s interval)
#: a host's latency shown is taken from an answer at least this many seconds after the one
#: shown before: at a half-second poll the figure is redrawn once a second, not at each poll
LATENCY_HOLD_S = 1.0


class FleetState:
    """The dashboard's memory of the fleet: latest snapshot, last good per host, GPU history.

    Fed only by `apply(snapshot)`; screens read it and never talk to hosts.
    """

    def __init__(
        self, host_names: list[str], poll_interval: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.host_names = list(host_names)
        self.poll_interval = poll_interval
        self.clock = clock
        self.snapshot: FleetSnapshot | None = None
        self.hosts: dict[str, HostSnapshot] = {}
        self.last_good: dict[str, HostSnapshot] = {}
        self.down_since: dict[str, float] = {}
        self.history: dict[tuple[str, int], deque[float]] = {}
        #: the same history as sparkline characters, computed once per sample, not per redraw
        self.spark: dict[tuple[str, int], deque[str]] = {}
        self.polls = 0
        #: each host's latency shown: (the time of the answer it came with, milliseconds)
        self._latency: dict[str, tuple[float, float | None]] = {}
        #: (the host snapshots shown, their runs in order): `runs` sorts once per change
        self._runs_sorted: tuple[list[HostSnapshot | None], list[Run]] | None = None
        #: each host's runs in order, put in order again only when they changed
        self._run_order = RunOrder()

    def apply(self, snap: FleetSnapshot) -> None:
        """Take one poll in: hosts seen now replace their previous snapshot."""
        self.snapshot = snap
        self.polls += 1
        known = set(self.host_names)  # a set: 200 hosts were 20,000 list comparisons a poll
        for h in snap.hosts:
            if h.name not in known:
                known.add(h.name)
                self.host_names.append(h.name)
            self.hosts[h.name] = h
            if h.reachable:
                self.last_good[h.name] = h
                held = self._latency.get(h.name)
                if held is None or not h.time or not 0 <= h.time - held[0] < LATENCY_HOLD_S:
                    self._latency[h.name] = (h.time, h.latency_ms)
                self.down_since.pop(h.name, None)
                history, spark = self.history, self.spark
                for g in h.gpus:
                    frac = (
                        g.memory_used_mib / g.memory_total_mib
                        if g.memory_total_mib and g.memory_used_mib is not None
                        else 0.0
                    )
                    key = (h.name, g.index)
                    # (setdefault would build two throwaway deques per GPU per poll)
                    if key not in history:
                        history[key], spark[key] = deque(maxlen=HISTORY), deque(maxlen=HISTORY)
                    fracs, chars = history[key], spark[key]
                    # at rest a card's memory stays put: its last character again, not quantised
                    # again (1,600 cards' calls a poll on a big fleet)
                    same = bool(fracs) and bool(chars) and fracs[-1] == frac
                    fracs.append(frac)
                    chars.append(chars[-1] if same else spark_char(frac))
            else:
                self.down_since.setdefault(h.name, h.time or snap.time or self.clock())

    def latency_ms(self, name: str) -> float | None:
        """`name`'s latency as shown: a live answer's, at most one new figure a second."""
        held = self._latency.get(name)
        return None if held is None else held[1]

    def age(self, name: str) -> float | None:
        """Seconds since `name` last answered, by the dashboard's clock."""
        good = self.last_good.get(name)
        return None if good is None else max(0.0, self.clock() - good.time)

    def is_stale(self, name: str) -> bool:
        """True when the newest figures for `name` are older than two poll intervals."""
        age = self.age(name)
        return age is not None and age > 2 * self.poll_interval

    def shown(self, name: str) -> HostSnapshot | None:
        """The snapshot whose figures to show: the live one, else the last good one."""
        h = self.hosts.get(name)
        if h is not None and h.reachable:
            return h
        return self.last_good.get(name)

    @property
    def runs(self) -> list[Run]:
        """Every run known, from the live or last good snapshot of each host, in the listing's
        order (`run_order`: live first, then by host and by name in natural order); sorted again
        only when a host's snapshot changed, and then only that host's runs that changed."""
        shown = [self.shown(n) for n in self.host_names]
        hit = self._runs_sorted
        if (
            hit is not None
            and len(hit[0]) == len(shown)
            and all(a is b for a, b in zip(hit[0], shown, strict=True))
        ):
            return list(hit[1])
        runs = self._run_order.order([(h.name, h.runs) for h in shown if h], self.host_names)
        self._runs_sorted = (shown, runs)
        return list(runs)

    @property
    def runs_listing(self) -> int:
        """A number that changes whenever `runs` lists other runs, in another order, or under
        another host or name (a poll that only moved steps and losses keeps it): read after
        `runs`."""
        return self._run_order.version

    @property
    def schedules(self) -> list[Schedule]:
        """Every schedule known, from the live or last good snapshot of each host."""
        return [s for n in self.host_names if (h := self.shown(n)) for s in h.schedules]

    def run(self, key: str) -> Run | None:
        """The run whose `key` (host:path) is given."""
        return next((r for r in self.runs if r.key == key), None)

    def schedule(self, host: str, sid: str) -> Schedule | None:
        """The schedule `sid` on `host`."""
        return next((s for s in self.schedules if s.host == host and s.id == sid), None)
