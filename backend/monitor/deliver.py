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
  a hook that cannot start) is given up at once with a warning. 307 and 308 are followed as
  POST (up to five hops, within the same deadline).
- **Hostile values.** Every string and number a host sent goes through one rule per sink
  (`arg_text`, `json_safe`): argv and environment get `shown()` text (printable, one line, no
  NUL, undecodable bytes as `\\xNN`); JSON gets valid UTF-8 (a lone surrogate as `shown()`
  writes it, control characters JSON-escaped) and numbers that are finite and within +-2**53,
  anything else null.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import json
import math
import os
import re
import signal
import ssl
import tempfile
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetdeck.backend.fleet.alert_rules import SEVERITY_DEFAULTS
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.alert_state import Bad, Reject
from fleetdeck.backend.monitor.grouping import GROUP_MAX, Group, group_id, group_payload
from fleetdeck.backend.monitor.outbox import Journal, Pending, pending_from_json
from fleetdeck.backend.monitor.silences import SilenceStore

HOOK_TIMEOUT = 30.0
CONCURRENCY = 8
RETRY_FIRST = 5.0
RETRY_CAP = 300.0
RETRY_MAX_AGE = 86400.0
MAX_REDIRECTS = 5
HEAD_LIMIT = 64 * 1024
#: seconds a sink's first new transition waits for others to go with it (`[alerts] group_wait`)
GROUP_WAIT = 10.0
#: how often the deliverer looks at silences.json while a silence holds an entry
SILENCE_RECHECK = 2.0
PLACEHOLDERS = ("title", "text", "rule", "host", "subject", "state", "since", "id", "severity")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT_LIMIT = 2**53


# -- one rule per sink --------------------------------------------------------------------------
def arg_text(v: Any) -> str:
    """What argv and the environment receive for a value: `shown()` text (printable, one line,
    no NUL, undecodable bytes as `\\xNN`); a number as its JSON rule gives it."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        n = json_safe(v)
        return "" if n is None else repr(n)
    return shown(v if isinstance(v, (str, bytes)) else str(v))


def json_safe(v: Any) -> Any:
    """`v` made fit for JSON that any receiver parses: strings valid UTF-8 (a lone surrogate, an
    undecodable byte, written `\\xNN` / `\\uNNNN` as `shown()` does); numbers finite and within
    +-2**53 (a double's exact integers), anything else null; containers item by item."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v if -_INT_LIMIT <= v <= _INT_LIMIT else None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        return _SURROGATE.sub(lambda m: shown(m.group(0)), v)
    if isinstance(v, dict):
        return {str(json_safe(str(k))): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return json_safe(str(v))


def transition_id(alert: Any) -> str:
    """The id of one transition: the same for every retry and after a restart."""
    since = (
        alert.since if isinstance(alert.since, (int, float)) and math.isfinite(alert.since) else 0.0
    )
    key = "\0".join(
        [
            shown(alert.rule),
            shown(alert.host),
            shown(alert.subject),
            shown(alert.state),
            f"{since:.3f}",
        ]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _since_text(since: Any) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(since))
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _severity(alert: Any) -> str:
    # an entry queued before severities (an outbox carried over) gets its rule's default
    return getattr(alert, "severity", "") or SEVERITY_DEFAULTS.get(
        str(getattr(alert, "rule", "")), "warning"
    )


def payload(alert: Any, tid: str | None = None) -> dict[str, Any]:
    """The JSON document of one transition (webhook body, hook stdin): the contract's alert
    object, its title and its id, made safe by `json_safe`."""
    d = {
        "id": tid or transition_id(alert),
        "rule": alert.rule,
        "host": alert.host,
        "subject": alert.subject,
        "state": alert.state,
        "since": alert.since,
        "text": alert.text,
        "title": alert.title,
        "severity": _severity(alert),
    }
    return json_safe(d)


def webhook_body(alert: Any, tid: str | None = None) -> bytes:
    """What the webhook receives (and a command hook on stdin)."""
    return json.dumps(payload(alert, tid), ensure_ascii=False, allow_nan=False).encode("utf-8")


def hook_values(alert: Any, tid: str | None = None) -> dict[str, str]:
    """Each placeholder's text, by the argv rule."""
    return {
        "title": arg_text(alert.title),
        "text": arg_text(alert.text),
        "rule": arg_text(alert.rule),
        "host": arg_text(alert.host),
        "subject": arg_text(alert.subject),
        "state": arg_text(alert.state),
        "since": _since_text(alert.since),
        "id": tid or transition_id(alert),
        "severity": arg_text(_severity(alert)),
    }


def hook_argv(argv: tuple[str, ...] | list[str], alert: Any, tid: str | None = None) -> list[str]:
    """The hook's argv for one alert: each placeholder replaced inside each argument, once,
    left to right, so text that itself holds `{title}` is never expanded again."""
    values = hook_values(alert, tid)
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], a) for a in argv]


def hook_env(alert: Any, tid: str | None = None) -> dict[str, str]:
    """The hook's environment: ours plus `FLEETDECK_<PLACEHOLDER>` for each value."""
    env = dict(os.environ)
    env.update({f"FLEETDECK_{k.upper()}": v for k, v in hook_values(alert, tid).items()})
    return env


# -- one attempt --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """How one attempt went: ok, or a warning and whether trying again can help."""

    ok: bool
    warning: str = ""
    retry: bool = True


async def run_hook(argv: list[str], env: dict[str, str], stdin: bytes, deadline: float) -> Outcome:
    """Run a command hook in a session of its own; its whole process group ends when it exits
    or at `deadline` seconds, whichever comes first (and when the caller is cancelled)."""
    name = arg_text(argv[0]) if argv else "?"
    # stderr goes to a file, not a pipe: a child the hook backgrounds keeps a pipe open, and the
    # hook's end would wait for it
    with tempfile.TemporaryFile() as err:
        spawn = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        )
        try:
            proc = await asyncio.shield(spawn)
        except (OSError, ValueError) as e:
            return Outcome(
                False,
                f"alert hook {name} could not start: {getattr(e, 'strerror', None) or e}",
                False,
            )
        except asyncio.CancelledError:  # cancelled while it started: it must not outlive us
            with contextlib.suppress(Exception):
                started = await spawn
                _kill_group(started.pid)
                await started.wait()
            raise

        async def feed_and_wait() -> int:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):  # a hook that ignores stdin may close it
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            with contextlib.suppress(OSError):
                proc.stdin.close()
            return await proc.wait()

        try:
            rc = await asyncio.wait_for(feed_and_wait(), deadline)
        except TimeoutError:
            return Outcome(
                False,
                f"alert hook {name} did not finish within {deadline:g}s; its process group "
                "was killed",
            )
        finally:
            _kill_group(proc.pid)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
        if rc:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 2048))
            last = err.read().decode("utf-8", "surrogateescape").strip().splitlines()
            return Outcome(
                False,
                f"alert hook {name} exited {rc}" + (f": {shown(last[-1])[:200]}" if last else ""),
            )
    return Outcome(True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def post_json(url: str, body: bytes, headers: dict[str, str], deadline: float) -> Outcome:
    """POST `body` to `url`, connect, send and the answer's head all within `deadline` seconds.
    2xx is delivered; 307/308 are followed as POST; any other redirect fails for good."""
    try:
        return await asyncio.wait_for(_post(url, body, headers), deadline)
    except TimeoutError:
        return Outcome(False, f"alert webhook {shown(url)} did not answer within {deadline:g}s")


async def _post(url: str, body: bytes, headers: dict[str, str]) -> Outcome:
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            status, head = await _post_once(url, body, headers)
        except (OSError, ValueError, asyncio.IncompleteReadError, ssl.SSLError) as e:
            return Outcome(
                False, f"alert webhook {shown(url)} failed: {shown(str(e) or type(e).__name__)}"
            )
        if 200 <= status < 300:
            return Outcome(True)
        if status in (307, 308) and head.get("location"):
            url = urllib.parse.urljoin(url, head["location"])
            if not url.startswith(("http://", "https://")):
                return Outcome(
                    False, f"alert webhook redirected to {shown(url)}, which is not http(s)", False
                )
            continue
        if 300 <= status < 400:
            return Outcome(
                False,
                f"alert webhook {shown(url)} answered {status} (redirect to "
                f"{shown(head.get('location', '?'))}); only 307 and 308 keep a POST a POST, so the "
                "alert was not delivered: point `webhook` at the final URL",
                False,
            )
        permanent = 400 <= status < 500 and status not in (408, 425, 429)
        return Outcome(False, f"alert webhook {shown(url)} answered HTTP {status}", not permanent)
    return Outcome(False, f"alert webhook {shown(url)}: more than {MAX_REDIRECTS} redirects", False)


async def _post_once(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    port = u.port or (443 if u.scheme == "https" else 80)
    ctx = ssl.create_default_context() if u.scheme == "https" else None
    reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx, limit=HEAD_LIMIT)
    try:
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        if ":" in u.hostname:
            host = f"[{u.hostname}]" + (f":{u.port}" if u.port else "")
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {host}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Connection: close",
            "User-Agent: fleetdeck-watch",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        parts = status_line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        head: dict[str, str] = {}
        size = len(status_line)
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            size += len(line)
            if size > HEAD_LIMIT:
                raise ValueError("answer head too large")
            k, _, v = line.decode("latin-1").partition(":")
            head[k.strip().lower()] = v.strip()
        return int(parts[1]), head
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 0.5)


# -- the outbox ---------------------------------------------------------------------------------
def _record(alert: Any) -> dict[str, Any]:
    # the values as the host sent them: each sink applies its own rule when it sends (JSON
    # with ensure_ascii keeps lone surrogates and non-finite numbers through a save)
    return {
        "rule": alert.rule,
        "host": alert.host,
        "subject": alert.subject,
        "state": alert.state,
        "since": alert.since,
        "text": alert.text,
        "title": alert.title,
        "severity": _severity(alert),
    }


class _Shown:
    """An alert rebuilt from its outbox record (the fields the sinks read)."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.rule, self.host, self.subject = (
            d.get("rule", ""),
            d.get("host", ""),
            d.get("subject", ""),
        )
        self.state, self.since, self.text = d.get("state", ""), d.get("since"), d.get("text", "")
        self.title = d.get("title", "")
        self.severity = d.get("severity") or ""


class Deliverer:
    """The outbox and the task that empties it (see the module docstring).

    `enqueue(alerts)` adds one entry per transition and sink; with a `journal` (`outbox.Journal`)
    each entry, each delivery and each retry is one append to it (the owner commits the journal
    with the alert state it belongs to); `warn` receives one sentence per failed attempt.

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
        self.on_alert = tuple(on_alert or ())
        self.webhook = webhook
        self.webhook_timeout = webhook_timeout
        self.hook_timeout = hook_timeout
        self.concurrency = max(1, concurrency)
        self.journal = journal
        self.warn = warn or (lambda _w: None)
        self.retry_first, self.retry_cap, self.max_age = retry_first, retry_cap, max_age
        self.group_wait = max(0.0, group_wait)
        self.group_max = max(1, int(group_max))
        self.silences = (
            silences if silences is not None else SilenceStore(move=True, warn=self.warn)
        )
        #: every entry, in the order queued
        self.pending: dict[tuple[str, str], Pending] = {}
        self.delivered = 0
        #: deliveries made (a group of several transitions is one)
        self.deliveries = 0
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
        self._tasks: set[asyncio.Task] = set()
        #: attempts started and not yet ended (a task's own end comes a moment after)
        self._running = 0

    @property
    def sinks(self) -> tuple[str, ...]:
        return (("command",) if self.on_alert else ()) + (("webhook",) if self.webhook else ())

    @property
    def grouping(self) -> bool:
        return self.group_wait > 0 and self.group_max > 1

    # -- the queues -----------------------------------------------------------------------------
    @staticmethod
    def _queue_of(p: Pending) -> tuple[str, str, str, str]:
        return (
            p.sink,
            str(p.alert.get("rule")),
            str(p.alert.get("host")),
            str(p.alert.get("subject")),
        )

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

    def enqueue(self, alerts: list[Any], now: float | None = None) -> None:
        """Add each transition for each configured sink (an id already queued is not added twice)."""
        now = time.time() if now is None else now
        self._look_at_silences(now)
        new = []
        for a in alerts:
            tid = transition_id(a)
            for sink in self.sinks:
                if (tid, sink) not in self.pending:
                    p = Pending(tid, sink, _record(a), now, next_at=self._due_at(sink, now))
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
        s = self.silences.matching(
            str(a.get("rule")), str(a.get("host")), str(a.get("subject")), now
        )
        if s is None:
            return True
        q = self._queues[self._queue_of(p)]
        nxt = self.pending[q[1]] if len(q) > 1 else None
        if a.get("state") == "firing" and nxt is not None and nxt.alert.get("state") == "resolved":
            # it fired and resolved within the silence: the operator hears of neither
            self._remove(p)
            self._remove(nxt)
            self.silenced += 2
            self._journal([p, nxt], [])
            return False
        p.next_at = s.ends
        self._parked[p.key] = s.ends
        self._journal([], [p])
        self._push(p)
        return False

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
                    await asyncio.wait_for(self._wake.wait(), wait)
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

    def _journal(self, done: list[Pending], tried: list[Pending]) -> None:
        """The records of one attempt's outcome, in one append (a group's entries are marked
        done together, or none of them); the journal rewritten when it has grown past its live
        entries (a fixed share of the appends, so each attempt costs the same)."""
        if self.journal is None or not (done or tried):
            return
        self.journal.record(done, tried)
        if self.journal.wants_compaction(len(self.pending)):
            self.journal.compact(self.pending.values())

    async def send(self, p: Pending) -> Outcome:
        """One attempt of one entry."""
        a = _Shown(p.alert)
        body = webhook_body(a, p.id)
        if p.sink == "command":
            return await run_hook(
                hook_argv(self.on_alert, a, p.id), hook_env(a, p.id), body, self.hook_timeout
            )
        headers = {"Idempotency-Key": p.id, "X-Fleetdeck-Delivery": p.id}
        return await post_json(self.webhook or "", body, headers, self.webhook_timeout)

    async def send_group(self, group: list[Pending]) -> Outcome:
        """One attempt of several entries of one sink, as one delivery listing them."""
        g = Group([(_Shown(p.alert), p.id) for p in group])
        body = json.dumps(
            json_safe(group_payload(g, payload)), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
        if group[0].sink == "command":
            env = hook_env(g, g.id)
            env.update(FLEETDECK_IDS=" ".join(g.ids), FLEETDECK_COUNT=str(len(g.ids)))
            return await run_hook(hook_argv(self.on_alert, g, g.id), env, body, self.hook_timeout)
        headers = {"Idempotency-Key": g.id, "X-Fleetdeck-Delivery": g.id}
        return await post_json(self.webhook or "", body, headers, self.webhook_timeout)


def options(config: Any) -> dict[str, Any]:
    """The `Deliverer` keywords the fleet file's `[alerts]` sets (what `watch`'s monitor passes)."""
    return {"webhook_timeout": config.webhook_timeout, "group_wait": config.group_wait}


class Notifier:
    """One-shot delivery without an outbox: every transition once to each sink, one warning
    sentence per failure (what `Deliverer` does per attempt, for scripts and tests)."""

    def __init__(self, config: Any, timeout: float = HOOK_TIMEOUT) -> None:
        self.config = config
        self.timeout = timeout

    async def deliver(self, alerts: list[Any]) -> list[str]:
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
                out = await d.send(Pending(tid, sink, _record(a), time.time()))
                if not out.ok:
                    warnings.append(out.warning)
        return warnings


__all__ = [
    "Deliverer",
    "GROUP_WAIT",
    "Notifier",
    "Outcome",
    "Pending",
    "arg_text",
    "hook_argv",
    "hook_env",
    "json_safe",
    "options",
    "payload",
    "post_json",
    "run_hook",
    "transition_id",
    "webhook_body",
]
