"""The Alertmanager sink: `watch` hands its alerts to each Alertmanager named in `[alerts]
alertmanager`, through Alertmanager's v2 API (`POST /api/v2/alerts`), the way Prometheus does,
so Alertmanager's grouping, silences, inhibition and receivers take over from there.

- **What is sent.** Each alert with the labels `alertname` (the rule), `host`, `subject` and
  `severity`, and the annotations `summary` (its title) and `description` (its text).
  `startsAt` is when it started firing. A firing alert's `endsAt` is `ENDS_AFTER` ahead and it
  is posted again every `RESEND_S` while it fires, so Alertmanager keeps it firing whatever its
  `resolve_timeout`; a resolved one is posted with `endsAt` at its resolve time. If `watch`
  stops for good, Alertmanager resolves what it last sent at that `endsAt`, as it does for a
  Prometheus that went away.
- **Never lost.** Every Alertmanager gets every alert. The whole firing set is posted on each
  change and every `RESEND_S`; a resolve is kept for each Alertmanager until that one took it,
  saved in `alertmanager.json` in the state folder (so one that could not be sent before a
  restart is sent after it). An Alertmanager that does not answer is one warning when it
  stops and one when it takes alerts again, never one per attempt; it is retried after
  `RETRY_FIRST` seconds, doubling up to `RETRY_CAP`.
- **Bounded.** One deadline covers each request (connect, send, the answer's head and at most
  `BODY_LIMIT` bytes of its body); at most `BATCH` alerts go in one request; at most
  `MAX_RESOLVES` resolves wait per Alertmanager (past that the oldest is left to Alertmanager's
  own `endsAt`, with a warning).
- **Hostile text.** Label values pass through `metrics.values.label`, the rule `/metrics` labels
  follow (printable, at most 512 characters, a longer one cut with a hash of the whole), so a
  silence matches what a scrape shows; annotations are made printable as `shown` writes them
  (backslashes and line breaks kept), valid UTF-8 and cut at `TEXT_MAX` characters.

The alert's form is `payload.py`; each Alertmanager is a `sink.Sink`
(`post.AlertmanagerEndpoint`), whose request goes through the monitor's one HTTP client
(`delivery/http_client.py`: proxies from the environment, TLS, redirects by its policy, the URL's query
string kept), and this engine calls nothing but its `send`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.alertmanager.payload import RESEND_S, am_alert, saved_key
from fleetdeck.backend.monitor.alertmanager.post import AlertmanagerEndpoint

RETRY_FIRST = 2.0
RETRY_CAP = 30.0
TIMEOUT = 10.0
BATCH = 64
MAX_RESOLVES = 10_000
#: the saved resolves are read only up to this size (a larger file is set aside, with a warning)
STATE_LIMIT = 64 * 2**20


def state_path() -> Path:
    """Where the resolves not yet taken by every Alertmanager are kept between runs."""
    return statedir.state_dir() / "alertmanager.json"


@dataclass
class Target:
    """One Alertmanager: its resolves not yet taken, when to post next, whether it is down."""

    url: str
    resolves: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: something changed since the last post it took
    dirty: bool = True
    last_ok: float = 0.0
    retry_at: float = 0.0
    failures: int = 0
    down: str | None = None
    #: held while a round of requests to it is in flight (the loop's and a drain's never overlap)
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)

    #: where its requests go (built by `AlertmanagerSink` with its deadline)
    sink: AlertmanagerEndpoint | None = None


class AlertmanagerSink:
    """The firing set and the resolves, posted to every Alertmanager (the module docstring
    says how). `update(firing, transitions)` after each judged poll; `run()` is the task that
    posts; `warn` receives one sentence per Alertmanager going down and coming back."""

    def __init__(
        self,
        urls: tuple[str, ...] | list[str],
        *,
        warn: Callable[[str], None] | None = None,
        timeout: float = TIMEOUT,
        resend: float = RESEND_S,
        retry_first: float = RETRY_FIRST,
        retry_cap: float = RETRY_CAP,
        path: Path | None = None,
    ) -> None:
        self.targets = [
            Target(u, sink=AlertmanagerEndpoint(u, timeout)) for u in dict.fromkeys(urls)
        ]
        self.warn = warn or (lambda _w: None)
        self.timeout, self.resend = timeout, resend
        self.retry_first, self.retry_cap = retry_first, retry_cap
        self.path = path or state_path()
        #: alert key -> the firing alert, as the engine said on the last poll
        self.firing: dict[str, Any] = {}
        #: requests that Alertmanagers took (tests, benchmarks)
        self.posted = 0
        self._wake = asyncio.Event()
        self._saved: bytes | None = None
        self._load()

    # -- what is to be sent -----------------------------------------------------------------------
    def update(self, firing: list[Any], transitions: list[Any], now: float | None = None) -> None:
        """The firing set after one poll and its transitions: a new firing set is posted at once,
        each resolve is kept for every Alertmanager until it took it."""
        now = time.time() if now is None else now
        new = {a.key: a for a in firing}
        changed = set(new) != set(self.firing) or any(
            (a.text, a.severity, a.since)
            != (self.firing[k].text, self.firing[k].severity, self.firing[k].since)
            for k, a in new.items()
            if k in self.firing
        )
        resolved = [a for a in transitions if a.state == "resolved"]
        for a in resolved:
            before = self.firing.get(a.key)
            start = before.since if before is not None else None
            doc = am_alert(a, start, a.since if math.isfinite(a.since) else now, now)
            for t in self.targets:
                t.resolves.pop(a.key, None)  # the newest resolve of a key is the one kept
                t.resolves[a.key] = doc
                while len(t.resolves) > MAX_RESOLVES:
                    old = next(iter(t.resolves))
                    del t.resolves[old]
                    self.warn(
                        f"Alertmanager {shown(t.url)}: more than {MAX_RESOLVES} resolves wait for it; the "
                        f"oldest ({shown(old)[:200]}) is left to the endsAt it was last sent with"
                    )
        self.firing = new
        if changed or resolved:
            for t in self.targets:
                t.dirty = True
            self._wake.set()
        if resolved:
            self.save()

    def batch(
        self, t: Target, now: float
    ) -> list[tuple[list[tuple[str, Any]], list[dict[str, Any]]]]:
        """What `t` is to be sent, in requests of at most BATCH alerts: (the resolves in it, by
        key, the alerts). Resolves go first, so an alert that resolved and fired again ends
        in the firing state."""
        docs: list[tuple[str | None, dict[str, Any]]] = [(k, d) for k, d in t.resolves.items()]
        docs += [(None, am_alert(a, a.since, None, now)) for a in self.firing.values()]
        return [
            (
                [(k, d) for k, d in docs[i : i + BATCH] if k is not None],
                [d for _, d in docs[i : i + BATCH]],
            )
            for i in range(0, len(docs), BATCH)
        ]

    def due(self, t: Target, now: float) -> float | None:
        """When `t` is to be posted next (None: nothing to send)."""
        if not t.resolves and not self.firing and not t.dirty:
            return None
        if t.failures:
            return t.retry_at
        if t.dirty or t.resolves:
            return now
        return t.last_ok + self.resend

    # -- posting ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Post to each Alertmanager when it is due, forever (cancel to stop); each has a loop
        of its own, so one that does not answer never delays another."""
        await asyncio.gather(*(self._run_target(t) for t in self.targets))

    async def _run_target(self, t: Target) -> None:
        while True:
            now = time.time()
            at = self.due(t, now)
            if at is not None and at <= now:
                await self.post(t)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if at is None else max(0.05, at - now)):
                    await self._wake.wait()

    async def drain(self) -> None:
        """Post once to every Alertmanager that has something to send (`watch --count`)."""
        await asyncio.gather(*(self._drain(t) for t in self.targets))

    async def _drain(self, t: Target) -> None:
        async with t.busy:  # after a round in flight, only what it left to send
            if self.due(t, time.time()) is not None and (t.dirty or t.resolves or t.failures):
                await self._post(t)

    async def post(self, t: Target) -> bool:
        """One round of requests to `t`; True when it took them all."""
        async with t.busy:
            return await self._post(t)

    async def _post(self, t: Target) -> bool:
        now = time.time()
        t.dirty = False
        taken: list[tuple[str, Any]] = []
        problem = None
        sink = t.sink or AlertmanagerEndpoint(t.url, self.timeout)
        for sent, docs in self.batch(t, now) or [([], [])]:
            out = await sink.send(docs)
            if not out.ok:
                problem = out.warning
                break
            if (
                out.warning
            ):  # it kept the valid ones (its API does): sending them again changes nothing
                self.warn(out.warning)
            taken += sent
        for k, doc in taken:
            if t.resolves.get(k) is doc:  # not one that resolved again while this was in flight
                del t.resolves[k]
        if taken:
            self.save()
        if problem is not None:
            t.dirty = True
            t.failures += 1
            delay = min(self.retry_cap, self.retry_first * 2 ** (t.failures - 1))
            t.retry_at = time.time() + delay
            if t.down is None:
                self.warn(
                    f"Alertmanager {shown(t.url)} does not take alerts ({problem}); retrying every "
                    f"{self.retry_first:g}s to {self.retry_cap:g}s until it does, nothing is dropped"
                )
            t.down = problem
            return False
        if t.down is not None:
            self.warn(
                f"Alertmanager {shown(t.url)} takes alerts again ({len(self.firing)} firing sent, "
                f"{len(taken)} resolved)"
            )
        t.down, t.failures, t.last_ok = None, 0, now
        self.posted += 1
        return True

    # -- the saved resolves ----------------------------------------------------------------------
    def save(self) -> None:
        """Write the resolves that wait (atomically); a failure is a warning."""
        doc = {"resolves": {t.url: list(t.resolves.values()) for t in self.targets if t.resolves}}
        data = json.dumps(doc, ensure_ascii=True).encode()
        if data == self._saved:
            return
        try:
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self.path)
            self._saved = data
        except OSError as e:
            self.warn(
                f"Alertmanager resolves not saved ({shown(str(e))}); they are kept in memory until they are sent"
            )

    def _load(self) -> None:
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        try:
            if size > STATE_LIMIT:
                raise ValueError(f"it is {size} bytes, past the {STATE_LIMIT} it may be")
            doc = json.loads(statedir.read_file(self.path, STATE_LIMIT).decode("utf-8"))
            saved = doc.get("resolves") if isinstance(doc, dict) else None
            if not isinstance(saved, dict):
                raise ValueError("it holds no resolves table")
        except (OSError, ValueError, RecursionError) as e:
            aside = self.path.with_name(f"{self.path.name}.bad")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            self.warn(
                f"{shown(str(self.path))} could not be read ({shown(str(e))[:200]}); set aside as "
                f"{shown(aside.name)}"
            )
            return
        bad = 0
        for t in self.targets:
            items = saved.get(t.url)
            for d in items if isinstance(items, list) else ():
                key = saved_key(d)
                if key is None:
                    bad += 1
                elif len(t.resolves) < MAX_RESOLVES:
                    t.resolves[key] = d
        if bad:
            self.warn(
                f"{shown(str(self.path))}: {bad} saved resolve(s) were not alerts and were left out"
            )


__all__ = [
    "AlertmanagerSink",
    "Target",
    "state_path",
]
