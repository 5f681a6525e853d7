"""Hook delivery: each alert transition reaches the `[alerts]` command and webhook once, from a
persisted outbox (`outbox.Journal`: each entry, delivery and retry one append, so an attempt
costs the same however full the outbox is), without ever holding up the poll loop.

- **Ids.** A transition's id is a hash of rule, host, subject, state and transition time
  (`transition_id`). The webhook gets it in the body (`id`) and in the `Idempotency-Key` and
  `X-Fleetdeck-Delivery` headers; a command hook in `$FLEETDECK_ID` and on stdin. A retry, or
  a delivery sent again after a crash, carries the same id, so a receiver drops a repeat by it.
- **Deadlines.** Each attempt has one deadline for all of it: connect, send and read for a
  webhook (`webhook_timeout`); the whole run of a command hook (`hook_timeout`). At the
  deadline a hook's whole process group is killed, children it backgrounded included; when a
  hook exits before it, whatever it left running in its group is killed too.
- **Beside polling.** `Deliverer.run()` is a task of its own; at most `concurrency` attempts run
  at once, so a blackholed endpoint costs each delivery its deadline, side by side. One
  alert's transitions reach each sink in order (its resolved never before its firing).
- **Groups.** What a sink gets within `group_wait` of its first new transition goes out as one
  delivery listing them (`grouping.py`); each keeps its own id and outbox entry.
- **Silences.** A transition an active silence matches waits in the outbox until the silence
  ends (`silences.py`); one that fired and resolved within it is never delivered.
- **Retries.** A failed attempt is retried after 5 s, doubling up to 5 min, for a day
  (`RETRY_*`); a permanent failure (a redirect other than 307/308, a 4xx other than 408/429,
  a hook that cannot start, a redirect from https down to http) is given up at once with a
  warning. 307 and 308 are followed as POST (up to five hops, within the same deadline), by the
  monitor's one HTTP client (`http_client.py`), which also takes proxies from the environment.
- **Sinks.** Each sink is a `sink.Sink` (`attempts.CommandSink`, `attempts.WebhookSink`); the
  task calls nothing but its `send`.
- **Hostile values.** Every string and number a host sent goes through one rule per sink
  (`arg_text`, `json_safe`): argv and environment get `shown()` text (printable, one line, no
  NUL, undecodable bytes as `\\xNN`); JSON gets valid UTF-8 (a lone surrogate as `shown()`
  writes it, control characters JSON-escaped) and numbers that are finite and within +-2**53,
  anything else null.

The parts: what each sink receives (`payloads.py`), one attempt at a hook or webhook
(`attempts.py`), the outbox's queues, groups and silences (`queue.py`); here, the task
that attempts what is due and the retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import time
from collections.abc import Callable
from typing import Any

from fleetdeck.backend.monitor.delivery.attempts import CommandSink, WebhookSink
from fleetdeck.backend.monitor.delivery.grouping import GROUP_MAX, group_id
from fleetdeck.backend.monitor.delivery.outbox import Journal, Pending
from fleetdeck.backend.monitor.delivery.payloads import transition_id
from fleetdeck.backend.monitor.delivery.queue import GROUP_WAIT, DeliveryQueue
from fleetdeck.backend.monitor.delivery.sink import Delivery, Outcome, Sink
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silences import SilenceStore

HOOK_TIMEOUT = 30.0
CONCURRENCY = 8
RETRY_FIRST = 5.0
RETRY_CAP = 300.0
RETRY_MAX_AGE = 86400.0
#: how often the deliverer looks at silences.json while a silence holds an entry
SILENCE_RECHECK = 2.0


class Deliverer(DeliveryQueue):
    """The outbox (`delivery_queue.DeliveryQueue`: its queues, groups and silences) and the task
    that empties it (see the module docstring): at most `concurrency` attempts at once, each
    failed one retried with backoff; `warn` receives one sentence per failed attempt."""

    def __init__(
        self,
        on_alert: tuple[str, ...] | None,
        webhook: str | None,
        *,
        webhook_timeout: float = 5.0,
        hook_timeout: float = HOOK_TIMEOUT,
        concurrency: int = CONCURRENCY,
        journal: Journal | None = None,
        warn: Callable[[str], None] | None = None,
        retry_first: float = RETRY_FIRST,
        retry_cap: float = RETRY_CAP,
        max_age: float = RETRY_MAX_AGE,
        group_wait: float = GROUP_WAIT,
        group_max: int = GROUP_MAX,
        silences: SilenceStore | None = None,
    ) -> None:
        super().__init__(
            on_alert,
            webhook,
            journal=journal,
            warn=warn or (lambda _w: None),
            retry_cap=retry_cap,
            group_wait=group_wait,
            group_max=group_max,
            silences=silences,
        )
        self.webhook_timeout = webhook_timeout
        self.hook_timeout = hook_timeout
        self.concurrency = max(1, concurrency)
        self.retry_first, self.max_age = retry_first, max_age
        self.delivered = 0
        #: deliveries made (a group of several transitions is one)
        self.deliveries = 0
        self._tasks: set[asyncio.Task] = set()
        #: attempts started and not yet ended (a task's own end comes a moment after)
        self._running = 0

    # -- delivering -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Deliver what is due, forever (cancel to stop; attempts in flight are cancelled with it
        and stay in the outbox)."""
        try:
            while True:
                now = time.time()
                self._look_at_silences(now)
                self._start_due(now)
                wait = None
                heads = [h[0][0] for h in self._due.values() if h]
                if heads and self._running < self.concurrency:
                    wait = max(0.05, min(heads) - time.time())
                if self._parked:  # a silence expired early ends the hold within SILENCE_RECHECK
                    wait = SILENCE_RECHECK if wait is None else min(wait, SILENCE_RECHECK)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
        finally:
            for t in list(self._tasks):
                t.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Attempt everything queued, once each and in order, without waiting for a group's
        window, and wait for those attempts (what `watch --count` does before it ends); a
        failure's retry, and what a silence holds, are left in the outbox."""
        tried: set[tuple[str, str]] = set()
        now = time.time()
        self._look_at_silences(now)
        while True:
            groups: dict[str, list[list[Pending]]] = {}
            for qk in list(self._queues):
                q = self._queues.get(qk)
                if not q:
                    continue
                p = self.pending[q[0]]
                if p.key in self._busy or p.key in tried or (p.attempts and p.next_at > now):
                    continue
                if not self._clear(p, now):
                    tried.add(p.key)
                    continue
                bucket = groups.setdefault(p.sink, [[]])
                if len(bucket[-1]) >= self.group_max or (bucket[-1] and not self.grouping):
                    bucket.append([])
                bucket[-1].extend(self._run_of(p, math.inf, self.group_max - len(bucket[-1])))
            free = self.concurrency - self._running
            for group in [g for gs in groups.values() for g in gs if g][: max(0, free)]:
                tried.update(p.key for p in group)
                self._start(group)
            if not self._tasks:
                return
            await asyncio.wait(list(self._tasks), return_when=asyncio.FIRST_COMPLETED)

    def _start_due(self, now: float) -> None:
        """Start the attempts that are due, as many as there are free places: per sink, the due
        heads (and what follows each of them, due too) as groups of at most `group_max`."""
        limit = self.group_max if self.grouping else 1
        for heap in list(self._due.values()):
            while heap and heap[0][0] <= now and self._running < self.concurrency:
                group: list[Pending] = []
                while heap and heap[0][0] <= now and len(group) < limit:
                    at, _n, key = heapq.heappop(heap)
                    p = self.pending.get(key)
                    if p is None or key in self._busy or p.next_at != at or not self._is_head(p):
                        continue  # stale: delivered, in flight, retried at another time or not first
                    if not self._clear(p, now):
                        continue  # a silence holds it
                    group += self._run_of(p, now, limit - len(group))
                if group:
                    self._start(group)

    def _start(self, group: list[Pending]) -> None:
        for p in group:
            self._busy.add(p.key)
        self._running += 1
        t = asyncio.ensure_future(self._attempt(group))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _attempt(self, group: list[Pending]) -> None:
        try:
            out = await (self.send(group[0]) if len(group) == 1 else self.send_group(group))
        except asyncio.CancelledError:  # it stays in the outbox, due again as it was
            for p in group:
                self._busy.discard(p.key)
                if self._is_head(p):
                    self._push(p)
            raise
        finally:
            self._running -= 1
            for p in group:
                self._busy.discard(p.key)
        now = time.time()
        done, tried = [], []
        what = (
            group[0].id
            if len(group) == 1
            else f"{group_id([p.id for p in group])} of {len(group)} transitions"
        )
        said = None
        for p in group:
            p.attempts += 1
            if out.ok:
                self._remove(p)
                self.delivered += 1
                done.append(p)
            elif not out.retry or now - max(p.created, self._parked.get(p.key, 0.0)) > self.max_age:
                self._remove(p)
                said = (
                    f"{out.warning} ({'not retried' if not out.retry else f'given up after {p.attempts} attempts'}; "
                    f"delivery {what})"
                )
                done.append(p)
            else:
                delay = min(self.retry_cap, self.retry_first * 2 ** (p.attempts - 1))
                p.next_at = now + delay
                said = (
                    f"{out.warning} (attempt {p.attempts}, retried in {delay:g}s; delivery {what})"
                )
                tried.append(p)
                if self._is_head(p):
                    self._push(p)
        if out.ok:
            self.deliveries += 1
        if said:
            self.warn(said)
        self._journal(done, tried)
        self._wake.set()

    def sink(self, name: str) -> Sink[Delivery]:
        """The sink an entry of `name` goes to (`command` or `webhook`)."""
        if name == "command":
            return CommandSink(self.on_alert, self.hook_timeout)
        return WebhookSink(self.webhook or "", self.webhook_timeout)

    async def send(self, p: Pending) -> Outcome:
        """One attempt of one entry."""
        return await self.sink(p.sink).send([Delivery(p.alert, p.id)])

    async def send_group(self, group: list[Pending]) -> Outcome:
        """One attempt of several entries of one sink, as one delivery listing them."""
        return await self.sink(group[0].sink).send([Delivery(p.alert, p.id) for p in group])


def options(config: Any) -> dict[str, Any]:
    """The `Deliverer` keywords the fleet file's `[alerts]` sets (what `watch`'s monitor passes)."""
    return {"webhook_timeout": config.webhook_timeout, "group_wait": config.group_wait}


class Notifier:
    """One-shot delivery without an outbox: every transition once to each sink, one warning
    sentence per failure (what `Deliverer` does per attempt, for scripts and tests)."""

    def __init__(self, config: Any, timeout: float = HOOK_TIMEOUT) -> None:
        self.config = config
        self.timeout = timeout

    async def deliver(self, alerts: list[Alert]) -> list[str]:
        """Deliver every transition, in order; one warning sentence per failed delivery."""
        warnings: list[str] = []
        d = Deliverer(
            self.config.on_alert,
            self.config.webhook,
            webhook_timeout=self.config.webhook_timeout,
            hook_timeout=self.timeout,
        )
        for a in alerts:
            tid = transition_id(a)
            for sink in d.sinks:
                out = await d.send(Pending(tid, sink, a, time.time()))
                if not out.ok:
                    warnings.append(out.warning)
        return warnings


__all__ = [
    "Deliverer",
    "Notifier",
    "options",
]
