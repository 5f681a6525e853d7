"""A run named the way a person names it, and waiting for its end.

`resolve_run`: one rule for every command that takes a run. `HOST RUN` where RUN is a run
folder's name under one of the host's runs roots (`run-8`), a path relative to a root
(`sweep/run-8`), or its absolute path; `HOST:PATH` is split by `split_target`. A name that
matches two runs is refused naming both; a name that matches none says what was looked for and
under which roots.

`wait_for_run`: polls one host with its resident probe (so a run's trainer is remembered and
its death without a final adapter is `failed`, whoever started it) until the run is finished
with a whole final adapter, failed, or the time is up. A host that does not answer is waited
through, and said (`notes`), never read as a failed run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetdeck.backend.fleet.config import Fleet
from fleetdeck.backend.fleet.models import HostSnapshot, Run
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.host.lib.text import shown

#: polls in a row a finished-without-adapter or never-live run is given before it is judged
SETTLE_POLLS = 3


class RunNotFound(Exception):
    """No run, or more than one, answers to the name: `code` (`no-run`, `ambiguous-run`) and a
    sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def split_target(host: str, run: str | None) -> tuple[str, str]:
    """(host, run) from `HOST RUN`, `HOST PATH` or `HOST:PATH` (RUN None)."""
    if run is None:
        h, sep, rest = host.partition(":")
        if not sep or not h or not rest:
            raise RunNotFound("no-run", f"name a run: HOST RUN or HOST:PATH (got {shown(host)})")
        return h, rest
    return host, run


def resolve_run(snap: HostSnapshot, given: str, roots: tuple[str, ...] = ()) -> Run:
    """The one run of `snap` that `given` names (see the module docstring)."""
    want = given.rstrip("/") or given
    exact = [r for r in snap.runs if r.path == want]
    if exact:
        return exact[0]
    by_name = [
        r
        for r in snap.runs
        if r.name == want or ("/" in want and r.path.endswith("/" + want.lstrip("/")))
    ]
    if len(by_name) == 1:
        return by_name[0]
    if len(by_name) > 1:
        raise RunNotFound(
            "ambiguous-run",
            f"{shown(given)} names {len(by_name)} runs on {snap.name}: "
            + ", ".join(shown(r.path) for r in by_name[:5])
            + "; give its path",
        )
    where = ", ".join(shown(r) for r in roots) or "its runs roots"
    raise RunNotFound(
        "no-run",
        f"no run named {shown(given)} on {snap.name} (looked for a run folder of that name or "
        f"path under {where}; {len(snap.runs)} run(s) listed there)",
    )


@dataclass
class WaitResult:
    """How a wait ended: `result` is `finished`, `failed` or `timeout`."""

    host: str
    given: str
    result: str
    path: str | None = None
    state: str | None = None
    reason: str | None = None
    adapter: str | None = None
    waited_s: float = 0.0
    unreachable_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"finished": 0, "failed": 1, "timeout": 3}[self.result]

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "run": self.given,
            "path": self.path,
            "result": self.result,
            "state": self.state,
            "reason": self.reason,
            "adapter": self.adapter,
            "waited_s": round(self.waited_s, 1),
            "unreachable_s": round(self.unreachable_s, 1),
            "notes": self.notes,
        }


def _judge(r: Run, odd: int) -> tuple[str | None, str | None, int]:
    """(result or None to go on waiting, reason, polls in a row the run looked over)."""
    if r.state == "finished" and r.adapter:
        return "finished", None, 0
    if r.state in ("failed", "cancelled"):
        return "failed", r.reason or r.state, 0
    over = r.pid is None and r.state in ("finished", "unknown")
    if not over:
        return None, None, 0
    odd += 1
    if odd < SETTLE_POLLS:
        return None, None, odd
    if r.state == "finished":
        return "failed", "it reached its last step but wrote no whole final adapter", odd
    return "failed", f"it is not running: {r.reason or 'no live process, no final adapter'}", odd


async def wait_for_run(
    fleet: Fleet,
    host: str,
    given: str,
    timeout: float | None = None,
    interval: float = 5.0,
    note: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> WaitResult:
    """Wait for run `given` on `host` (see the module docstring). RunNotFound when it names no
    run, or two, on the first poll the host answers."""
    cfg = fleet.host(host)
    start = clock()
    res = WaitResult(host=host, given=given, result="timeout")
    say = note or (lambda s: None)
    down_since: float | None = None
    path: str | None = None
    odd = 0
    async with Poller(Fleet(hosts=(cfg,), source=fleet.source, alerts=fleet.alerts)) as poller:
        while True:
            snap = (await poller.poll()).hosts[0]
            now = clock()
            if not snap.reachable:
                if down_since is None:
                    down_since = now
                    msg = f"{host} does not answer ({shown(snap.error or '?')}): waiting through it"
                    res.notes.append(msg)
                    say(msg)
            else:
                if down_since is not None:
                    res.unreachable_s += now - down_since
                    msg = f"{host} answers again after {now - down_since:.0f}s"
                    res.notes.append(msg)
                    say(msg)
                    down_since = None
                found = [r for r in snap.runs if r.path == path] if path else []
                if path and not found:
                    res.result, res.reason = "failed", f"its folder {shown(path)} is gone"
                    break
                r = found[0] if found else resolve_run(snap, given, cfg.runs)
                path, res.path, res.state = r.path, r.path, r.state
                verdict, why, odd = _judge(r, odd)
                if verdict is not None:
                    res.result, res.reason, res.adapter = verdict, why, r.adapter
                    break
            if timeout is not None and now - start >= timeout:
                break
            left = None if timeout is None else max(0.0, timeout - (now - start))
            await asyncio.sleep(interval if left is None else min(interval, left))
    end = clock()
    if down_since is not None:
        res.unreachable_s += end - down_since
    res.waited_s = end - start
    return res


__all__ = ["RunNotFound", "WaitResult", "resolve_run", "split_target", "wait_for_run"]
