"""The probe's run-state decision: one run's state and reason, from what its files say (its
facts and run.json) and the live process seen working in it.

Each reason a run is in its state is one small rule, `_by_<reason>(r, rj, problems, seen)`,
tried in `RULES` order: the first that applies decides (True), and `decide` then adds the ETA
and the reason line. In order: the trainer's own word, the final adapter, the recorded trainer
gone, a live process, a recorded pid that cannot be told from a reused one, nothing at all."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import time

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.probe.common import MIN_STALL_S, STATE, Procs

#: the states run.json decides by itself, whatever runs
OWN_WORD = ("queued", "cancelled", "finished", "failed")


class Seen:
    """What the probe saw of one run beyond its files: the live process working in it, the
    process table, the stall rule's factor, the time, and the steps between its updates."""

    def __init__(
        self,
        live_pid: int | None,
        procs: Procs,
        stall_factor: float,
        now: float,
        interval: float,
        log: dict | None = None,
        worker: list | None = None,
    ) -> None:
        self.live_pid = live_pid
        self.procs = procs
        self.stall_factor = stall_factor
        self.now = now
        self.interval = interval
        #: what its log said (run_log.read), or None
        self.log = log or {}
        #: the process this probe last saw working in the run:
        #: [pid, start, command, last seen, the run's last update when first seen, trained]
        self.worker = worker


#: run path -> [pid, start ticks, command, last seen, last update at first sight, trained]: the
#: process a resident probe saw working in each run, so that its end without a final adapter is
#: `failed`, whoever started it. Only a process the run moved under (its log or files changed
#: while it lived) counts as its trainer: an eval that reads a checkpoint and ends is not a death.
WORKERS_LIMIT = 4096


def _workers() -> dict[str, list]:
    return STATE.setdefault("workers", {})


def adopt(workers: object) -> None:
    """Workers a controller handed back (what this host's last probe remembered, before a
    restart): kept where this probe has none of its own; anything malformed is ignored."""
    if not isinstance(workers, dict):
        return
    w = _workers()
    for path, x in list(workers.items())[:WORKERS_LIMIT]:
        ok = (
            isinstance(path, str)
            and isinstance(x, list)
            and len(x) == 6
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**63 for v in x[:2])
            and isinstance(x[2], str)
            and _when(x[3]) is not None
            and (x[4] is None or _when(x[4]) is not None)
            and isinstance(x[5], bool)
        )
        if ok and path not in w:
            w[path] = [x[0], x[1], x[2][:200], _when(x[3]), _when(x[4]), x[5]]


def _when(v: object) -> float | None:
    """A time handed back by a controller as a float within reason, or None (a number JSON can
    carry but a clock cannot: 10**400, 1e300, NaN)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except (OverflowError, ValueError):
        return None
    return f if 0 <= f < 2**40 else None


def remember_worker(
    path: str, pid: int, procs: Procs, now: float, last_update: float | None
) -> None:
    """Note `pid` (with its start time and command) as the process working in run `path`, and
    whether the run has moved since it was first seen."""
    st = procs.stat(pid)
    if st is None:
        return
    w = _workers()
    old = w.get(path)
    if old is not None and old[0] == pid and old[1] == st[1]:
        old[3] = now
        if last_update is not None and (old[4] is None or last_update > old[4]):
            old[5] = True
        return
    if len(w) >= WORKERS_LIMIT and path not in w:
        w.clear()
    w[path] = [pid, st[1], procs.command(pid)[:200], now, last_update, False]


def start_ticks(rj: dict) -> int | None:
    """The trainer's start time run.json records (clock ticks), or None."""
    for k in ("start_ticks", "pid_start_time"):
        if isinstance(rj.get(k), int) and not isinstance(rj.get(k), bool):
            return rj[k]
    return None


def recorded_alive(
    procs: Procs, rj: dict, pid_key: str = "pid", start_key: str | None = None
) -> int | None:
    """The pid run.json records, when that very process still runs (pid and start time); a pid
    recorded without its start time is never taken as alive: the number may be reused."""
    pid = rj.get(pid_key)
    start = rj.get(start_key) if start_key else start_ticks(rj)
    if (
        not isinstance(pid, int)
        or isinstance(pid, bool)
        or pid == procs.me
        or not isinstance(start, int)
    ):
        return None
    return pid if procs.alive(pid, start) else None


def _recorded_pid(rj: dict, procs: Procs) -> int | None:
    return rj.get("pid") if isinstance(rj.get("pid"), int) and rj.get("pid") != procs.me else None


def _said_running(rj: dict, procs: Procs) -> int | None:
    """The pid run.json records while it says `running`, or None."""
    return _recorded_pid(rj, procs) if rj.get("state") == "running" else None


def stall_limit(r: dict, stall_factor: float, interval: float) -> float:
    """Seconds of silence past which a run's files say its trainer no longer moves: the stall
    rule's window (at least MIN_STALL_S, else `stall_factor` step times, else two updates)."""
    sps = r["seconds_per_step"] or 0
    return max(MIN_STALL_S, stall_factor * sps, 2 * sps * interval)


def at_last_step(r: dict) -> bool:
    """The run has reached its last step (step >= max_steps), final adapter or not."""
    return r["step"] is not None and bool(r["max_steps"]) and r["step"] >= r["max_steps"]


def settled(
    r: dict, stall_factor: float, interval: float, now: float, heard: float | None = None
) -> bool:
    """True for a run at its last step with no final adapter whose files (and its log in the
    folder, last written at `heard`) have been silent past the stall window: no process is
    looked for in it any more but the one this probe saw working there (`worker_alive`), so it
    is finished, or stalled while that one still runs. While its files moved recently it stays
    undecided (its trainer may be saving or evaluating)."""
    if r["adapter"] is not None or not at_last_step(r):
        return False
    last = max(r["last_update"] or 0, heard or 0)
    return last > 0 and now - last > stall_limit(r, stall_factor, interval)


def worker_alive(path: str, procs: Procs) -> int | None:
    """The pid of the process this probe last saw working in run `path` when that very process
    (pid and start time) still runs, else None: a settled run's one cheap look for its trainer."""
    w = _workers().get(path)
    return w[0] if w is not None and procs.alive(w[0], w[1]) else None


# -- one rule per reason ------------------------------------------------------------------------
def _by_own_word(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """run.json says queued, cancelled, finished or failed: the trainer's or the launcher's word,
    with its own words as the reason; a queued run whose waiter is gone never starts."""
    said = rj.get("state")
    if said not in OWN_WORD:
        return False
    r["state"] = said
    told = rj.get("error") or rj.get("cancel_reason")
    if said in ("failed", "cancelled") and isinstance(told, str) and told.strip():
        problems.insert(0, told.strip()[:500])  # the trainer's or the launcher's own words
    if said == "queued":
        _queued(r, rj, problems, seen.procs)
    return True


def _queued(r: dict, rj: dict, problems: list[str], procs: Procs) -> None:
    if recorded_alive(procs, rj):
        r["pid"] = _recorded_pid(rj, procs)
    wpid = rj.get("waiter_pid")
    if isinstance(wpid, int) and not recorded_alive(procs, rj, "waiter_pid", "waiter_start_ticks"):
        # the launch waiter is what would start it: without it the run never starts
        r["state"] = "cancelled"
        problems.insert(0, f"queued, but its waiter (pid {wpid}) is gone: it will never start")


def _by_final_adapter(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """A final adapter: finished. The last step reached with no adapter yet: finished once no
    process works in the run any more; while one does, it is still saving (or evaluating), so
    the run stays with the rules below (running), saying so."""
    if r["adapter"] is not None:
        r["state"] = "finished"
        return True
    if at_last_step(r):
        if seen.live_pid is None:
            r["state"] = "finished"
            return True
        problems.append(
            f"its last step is reached ({r['step']}/{r['max_steps']}) and its trainer (pid "
            f"{seen.live_pid}) is still at work: saving or evaluating; no final adapter yet"
        )
    return False


def _by_trainer_gone(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """run.json names its trainer (pid and start time: its identity) and that process is not
    the one seen working: certain, so failed. Another process found in the folder (a
    stranger's python, a reused pid) is not it, and makes the run neither running nor stalled."""
    rpid = _said_running(rj, seen.procs)
    if rpid and start_ticks(rj) is not None and seen.live_pid != rpid:
        r["state"] = "failed"
        problems.insert(0, f"run.json says running but pid {rpid} is gone (or now another process)")
        return True
    return False


def _by_live_process(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """A live process works in the run: running; stalled when it is stopped by a signal (state
    T, at once) or when its log and files have been silent too long."""
    if seen.live_pid is None:
        return False
    r["state"], r["pid"] = "running", seen.live_pid
    st = seen.procs.stat(seen.live_pid)
    if st is not None and st[2] in ("T", "t"):
        r["state"] = "stalled"
        problems.insert(
            0,
            f"its trainer (pid {seen.live_pid}) is stopped (state {st[2]}: SIGSTOP, ^Z or a "
            "debugger): nothing moves until it is continued",
        )
        return True
    silent = seen.now - r["last_update"] if r["last_update"] else None
    sps = r["seconds_per_step"]
    if silent is not None and sps:
        if silent > stall_limit(r, seen.stall_factor, seen.interval):
            r["state"] = "stalled"
            problems.insert(0, f"no progress for {silent:.0f}s (step time {sps:.1f}s)")
    return True


def _by_worker_gone(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """The process this probe saw working in the run is gone, and no final adapter appeared:
    failed, for every run, whoever started it; the reason names the process and its log's last
    error line."""
    w = seen.worker
    if w is None or not w[5] or seen.live_pid is not None or seen.procs.alive(w[0], w[1]):
        return False
    r["state"] = "failed"
    try:
        when = time.strftime("%H:%M:%S", time.localtime(w[3]))
    except (OverflowError, ValueError, OSError):
        when = "?"
    why = (
        f"its trainer (pid {w[0]}, `{shown(w[2])[:120]}`) ended without a final adapter "
        f"(last seen working at {when})"
    )
    if seen.log.get("error"):
        why += f"; its log's last error: {seen.log['error']}"
    problems.insert(0, why)
    return True


def _by_pid_without_start_time(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """run.json says running with a bare pid: no identity, so the state stays unknown."""
    rpid = _said_running(rj, seen.procs)
    if rpid and start_ticks(rj) is None:
        problems.insert(
            0,
            f"run.json records pid {rpid} without its start time, so it cannot be told "
            "from a reused pid; no live process was seen working in the run",
        )
        return True
    return False


def _by_nothing(r: dict, rj: dict, problems: list[str], seen: Seen) -> bool:
    """Nothing says what the run is: unknown, and why when no problem says it already."""
    if not problems:
        problems.append("no live process, no final adapter")
    return True


RULES = (
    _by_own_word,
    _by_final_adapter,
    _by_trainer_gone,
    _by_live_process,
    _by_worker_gone,
    _by_pid_without_start_time,
    _by_nothing,
)


def decide(
    r: dict,
    rj: dict,
    problems: list[str],
    interval: float,
    live_pid: int | None,
    procs: Procs,
    stall_factor: float,
    now: float,
    log: dict | None = None,
) -> None:
    """Decide run `r`'s state (the first of `RULES` that applies), its ETA and its reason."""
    path = r["path"]
    seen = Seen(live_pid, procs, stall_factor, now, interval, log, _workers().get(path))
    for rule in RULES:
        if rule(r, rj, problems, seen):
            break
    if live_pid is not None and r["state"] in ("running", "stalled"):
        remember_worker(path, live_pid, procs, now, r["last_update"])
    if path in _workers() and r["state"] in ("running", "stalled", "failed"):
        r["worker"] = list(_workers()[path])  # handed back by the controller after a restart
    elif r["state"] == "unknown" and seen.log.get("error"):
        problems.append(f"its log's last error: {seen.log['error']}")
    # a stalled run has no ETA: its step time says nothing about when it will move again
    if (
        r["state"] == "running"
        and r["step"] is not None
        and r["max_steps"]
        and r["seconds_per_step"]
        and r["max_steps"] > r["step"]
    ):
        # steps left and a step time: an ETA; never `0s` for a run with steps to go
        r["eta_seconds"] = max(0.1, round((r["max_steps"] - r["step"]) * r["seconds_per_step"], 1))
    if r["state"] in ("unknown", "failed", "stalled") or problems:
        r["reason"] = "; ".join(problems) or None
