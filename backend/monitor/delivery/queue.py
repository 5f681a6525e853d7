"""The outbox in memory: the entries waiting for each sink, in the order they may go out, and
what holds them back (a group's window, a silence). The journal on disk (`outbox.Journal`) gets
one append per change; `deliver.Deliverer` attempts what is due and does the retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fleetdeck.backend.fleet.alert_rules import NOTICES
from fleetdeck.backend.monitor.alert_state import Bad, Reject
from fleetdeck.backend.monitor.delivery.grouping import GROUP_MAX
from fleetdeck.backend.monitor.delivery.outbox import Journal
from fleetdeck.backend.monitor.delivery.outbox_entry import Held, Pending, pending_from_json
from fleetdeck.backend.monitor.delivery.payloads import transition_id
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silences import SilenceStore

#: seconds a sink's first new transition waits for others to go with it (`[alerts] group_wait`)
GROUP_WAIT = 10.0


class DeliveryQueue:
    """The entries of the outbox, queued per alert and sink.

    `enqueue(alerts)` adds one entry per transition and sink; with a `journal` (`outbox.Journal`)
    each entry, each delivery and each retry is one append to it (the owner commits the journal
    with the alert state it belongs to).

    Each attempt costs the same however full the outbox is: the entries of one alert at one sink
    form a queue (a resolved never overtakes its firing), and the heads of those queues wait in
    one heap per sink by when they are due, so starting an attempt and ending one touch only its
    own entries.

    **Groups** (`grouping.py`): a sink's first new transition waits `group_wait` seconds, and
    what the sink gets meanwhile goes with it as one delivery of at most `group_max`
    (`group_wait = 0` or `group_max = 1`: each transition alone, at once).

    **Silences** (`silences.py`, read again when the file changes): an entry an active silence
    matches is held in the outbox until the silence ends (its due time is the silence's end,
    journaled), then delivered; a firing and its resolved both held by a silence are dropped
    together, never delivered."""

    def __init__(
        self,
        on_alert: tuple[str, ...] | None,
        webhook: str | None,
        *,
        journal: Journal | None,
        warn: Callable[[str], None],
        retry_cap: float,
        group_wait: float = GROUP_WAIT,
        group_max: int = GROUP_MAX,
        silences: SilenceStore | None = None,
    ) -> None:
        self.on_alert = tuple(on_alert or ())
        self.webhook = webhook
        self.journal = journal
        self.warn = warn
        self.retry_cap = retry_cap
        self.group_wait = max(0.0, group_wait)
        self.group_max = max(1, int(group_max))
        self.silences = (
            silences if silences is not None else SilenceStore(move=True, warn=self.warn)
        )
        #: every entry, in the order queued
        self.pending: dict[tuple[str, str], Pending] = {}
        #: transitions a silence dropped (a firing and its resolved, both within it)
        self.silenced = 0
        #: each alert's entries at each sink, oldest first; only the first may be attempted
        self._queues: dict[tuple[str, str, str, str], deque[tuple[str, str]]] = {}
        #: per sink, (due, tie-break, key) of queue heads; a record is stale when its entry is
        #: gone, busy, no longer a head or due at another time (skipped when popped)
        self._due: dict[str, list[tuple[float, int, tuple[str, str]]]] = {}
        self._order = itertools.count()
        self._busy: set[tuple[str, str]] = set()
        #: entries a silence holds, and until when
        self._parked: dict[tuple[str, str], float] = {}
        #: per sink, when its open group goes out
        self._window: dict[str, float] = {}
        self._wake = asyncio.Event()

    @property
    def sinks(self) -> tuple[str, ...]:
        return (("command",) if self.on_alert else ()) + (("webhook",) if self.webhook else ())

    @property
    def grouping(self) -> bool:
        return self.group_wait > 0 and self.group_max > 1

    # -- the queues -----------------------------------------------------------------------------
    @staticmethod
    def _queue_of(p: Pending) -> tuple[str, str, str, str]:
        return (p.sink, p.alert.rule, p.alert.host, p.alert.subject)

    def _add(self, p: Pending) -> None:
        self.pending[p.key] = p
        q = self._queues.setdefault(self._queue_of(p), deque())
        q.append(p.key)
        if len(q) == 1:
            self._push(p)
        elif q[0] in self._parked:
            # what comes after a held entry may end it (a resolved within the silence): look again now
            self._unpark(self.pending[q[0]], time.time())

    def _push(self, p: Pending) -> None:
        heapq.heappush(self._due.setdefault(p.sink, []), (p.next_at, next(self._order), p.key))

    def _remove(self, p: Pending) -> None:
        self.pending.pop(p.key, None)
        self._parked.pop(p.key, None)
        qk = self._queue_of(p)
        q = self._queues.get(qk)
        if q is None:
            return
        if q and q[0] == p.key:
            q.popleft()
            if q:
                self._push(self.pending[q[0]])  # the next transition of that alert is due now
        else:
            with contextlib.suppress(ValueError):
                q.remove(p.key)
        if not q:
            del self._queues[qk]

    def _is_head(self, p: Pending) -> bool:
        q = self._queues.get(self._queue_of(p))
        return q is not None and bool(q) and q[0] == p.key

    def _due_at(self, sink: str, now: float) -> float:
        """When an entry queued now for `sink` goes out: with the sink's open group, or in a new
        one `group_wait` from now."""
        if not self.grouping:
            return now
        w = self._window.get(sink)
        if w is None or w <= now:
            w = self._window[sink] = now + self.group_wait
        return w

    def enqueue(self, alerts: list[Alert], now: float | None = None) -> None:
        """Add each transition for each configured sink (an id already queued is not added twice)."""
        now = time.time() if now is None else now
        self._look_at_silences(now)
        new = []
        for a in alerts:
            tid = transition_id(a)
            for sink in self.sinks:
                if (tid, sink) not in self.pending:
                    p = Pending(tid, sink, a, now, next_at=self._due_at(sink, now))
                    self._add(p)
                    new.append(p)
        if new and self.journal is not None:
            self.journal.add(new)
        if new:
            self._wake.set()

    def to_state(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.pending.values()]

    def _carry(self, p: Pending, now: float) -> None:
        # what a silence held (or a group waited for) when the last watch ended is looked at
        # again soon: that silence may have been expired meanwhile
        p.next_at = min(p.next_at, now + self.retry_cap)
        self._add(p)

    def load_state(self, items: Any, where: str = "outbox") -> list[Reject]:
        """Carry on with entries saved as a list (`to_state`, and the outbox of an `alerts.json`
        written before the journal); each entry is checked on its own, and the ones that do not
        load are returned. Entries for a sink no longer configured are dropped."""
        if items is None:
            return []
        if not isinstance(items, list):
            return [Reject(where, f"is not a list ({type(items).__name__})", items)]
        rejects, new = [], []
        now = time.time()
        for i, d in enumerate(items):
            try:
                p = pending_from_json(d)
            except Bad as e:
                rejects.append(Reject(f"{where}[{i}]", str(e), d))
                continue
            if p.sink in self.sinks and p.key not in self.pending:
                self._carry(p, now)
                new.append(p)
        if new and self.journal is not None:
            self.journal.add(new)
        self._wake.set()
        return rejects

    def load_journal(
        self, committed: int | None, *, move: bool = True
    ) -> tuple[list[Reject], list[str]]:
        """Carry on with what the journal holds (see `outbox.Journal.load`)."""
        assert self.journal is not None
        live, rejects, warnings = self.journal.load(committed, move=move)
        now = time.time()
        for p in live:
            if p.sink in self.sinks and p.key not in self.pending:
                self._carry(p, now)
        self._wake.set()
        return rejects, warnings

    # -- silences -------------------------------------------------------------------------------
    def held(self) -> list[tuple[dict[str, Any], float]]:
        """The notices and transitions a silence holds back now: (the alert as it will be
        delivered, when the silence ends), soonest first."""
        out = [
            (self.pending[k].alert_json(), until)
            for k, until in self._parked.items()
            if k in self.pending
        ]
        return sorted(out, key=lambda x: x[1])

    def _look_at_silences(self, now: float) -> None:
        """Read silences.json again if it changed; then every held entry is looked at again."""
        if self.silences.refresh():
            for key in list(self._parked):
                p = self.pending.get(key)
                if p is not None:
                    self._unpark(p, now)

    def _unpark(self, p: Pending, now: float) -> None:
        if p.next_at > now and self._is_head(p) and p.key not in self._busy:
            p.next_at = now
            self._push(p)
            self._wake.set()

    def _clear(self, p: Pending, now: float) -> bool:
        """True when queue head `p` may be attempted now; otherwise a silence holds it (until the
        silence ends, journaled), or drops it with the resolved that follows it."""
        a = p.alert
        s = self.silences.matching(a.rule, a.host, a.subject, now)
        if s is None:
            return True
        q = self._queues[self._queue_of(p)]
        nxt = self.pending[q[1]] if len(q) > 1 else None
        notice = a.rule in NOTICES
        if not notice and a.state == "firing" and nxt is not None and nxt.alert.state == "resolved":
            # it fired and resolved within the silence: the operator hears of neither
            self._remove(p)
            self._remove(nxt)
            self.silenced += 2
            self._journal([p, nxt], [])
            return False
        if not notice and a.state == "resolved":
            # a flapping alert held behind its resolve: each fire/resolve pair after it happened
            # within the silence too, and is dropped; the resolve alone goes when it ends
            pairs = []
            keys = list(q)
            i = 1
            while i + 1 < len(keys):
                f, r = self.pending[keys[i]], self.pending[keys[i + 1]]
                if f.alert.state != "firing" or r.alert.state != "resolved":
                    break
                pairs += [f, r]
                i += 2
            for x in pairs:
                self._remove(x)
            if pairs:
                self.silenced += len(pairs)
                self._journal(pairs, [])
        if p.held is None:
            # said when it goes: a notice held by a maintenance window arrives late, and says why
            p.held = Held(now, s.id)
            p.alert = replace(
                a,
                text=f"{a.text} (held since "
                f"{time.strftime('%H:%M', time.localtime(now))} by silence {s.id})",
            )
        p.next_at = s.ends
        self._parked[p.key] = s.ends
        self._journal([], [p])
        self._push(p)
        return False

    def held_note(self, a: Any, now: float | None = None) -> str:
        """What `watch`'s line of transition `a` adds when a silence holds it: the silence and
        until when, and for a notice that it is delivered then (an alert that also resolves
        within the silence is dropped with its resolve); "" when none does."""
        s = self.silences.of(a, time.time() if now is None else now)
        if s is None:
            return ""
        until = time.strftime("%H:%M", time.localtime(s.ends))
        then = "; delivered when it ends" if a.rule in NOTICES else ""
        return f" (held by silence {s.id} until {until}{then})"

    def _run_of(self, p: Pending, now: float, room: int) -> list[Pending]:
        """Queue head `p` and, when grouping, the entries behind it that are due too (one alert's
        transitions in order, in one delivery), at most `room`."""
        out = [p]
        if not self.grouping:
            return out
        for key in itertools.islice(self._queues[self._queue_of(p)], 1, None):
            if len(out) >= room:
                break
            x = self.pending[key]
            if x.next_at > now or key in self._busy:
                break
            out.append(x)
        return out

    def _journal(self, done: list[Pending], tried: list[Pending]) -> None:
        """The records of one attempt's outcome, in one append (a group's entries are marked
        done together, or none of them); the journal rewritten when it has grown past its live
        entries (a fixed share of the appends, so each attempt costs the same)."""
        if self.journal is None or not (done or tried):
            return
        self.journal.record(done, tried)
        if self.journal.wants_compaction(len(self.pending)):
            self.journal.compact(self.pending.values())


__all__ = ["GROUP_WAIT", "DeliveryQueue"]
