"""The probe's run-state decision: one run's state and reason, from what its files say (its
facts and run.json) and the live process seen working in it.

Each reason a run is in its state is one small rule, `_by_<reason>(r, rj, problems, seen)`,
tried in `RULES` order: the first that applies decides (True), and `decide` then adds the ETA
and the reason line. In order: the trainer's own word, the final adapter, the recorded trainer
gone, a live process, a recorded pid that cannot be told from a reused one, nothing at all."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

from fleetdeck.backend.host.probe.common import MIN_STALL_S

#: the states run.json decides by itself, whatever runs
OWN_WORD = ("queued", "cancelled", "finished", "failed")


class Seen:
    """What the probe saw of one run beyond its files: the live process working in it, the
    process table, the stall rule's factor, the time, and the steps between its updates."""

    def __init__(self, live_pid, procs, stall_factor, now, interval):
        self.live_pid = live_pid
        self.procs = procs
        self.stall_factor = stall_factor
        self.now = now
        self.interval = interval


def start_ticks(rj):
    """The trainer's start time run.json records (clock ticks), or None."""
    for k in ("start_ticks", "pid_start_time"):
        if isinstance(rj.get(k), int) and not isinstance(rj.get(k), bool):
            return rj[k]
    return None


def recorded_alive(procs, rj, pid_key="pid", start_key=None):
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


def _recorded_pid(rj, procs):
    return rj.get("pid") if isinstance(rj.get("pid"), int) and rj.get("pid") != procs.me else None


def _said_running(rj, procs):
    """The pid run.json records while it says `running`, or None."""
    return _recorded_pid(rj, procs) if rj.get("state") == "running" else None


# -- one rule per reason ------------------------------------------------------------------------
def _by_own_word(r, rj, problems, seen):
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


def _queued(r, rj, problems, procs):
    if recorded_alive(procs, rj):
        r["pid"] = _recorded_pid(rj, procs)
    wpid = rj.get("waiter_pid")
    if isinstance(wpid, int) and not recorded_alive(procs, rj, "waiter_pid", "waiter_start_ticks"):
        # the launch waiter is what would start it: without it the run never starts
        r["state"] = "cancelled"
        problems.insert(0, f"queued, but its waiter (pid {wpid}) is gone: it will never start")


def _by_final_adapter(r, rj, problems, seen):
    """A final adapter, or the last step reached: finished."""
    if r["adapter"] is not None or (
        r["step"] is not None and r["max_steps"] and r["step"] >= r["max_steps"]
    ):
        r["state"] = "finished"
        return True
    return False


def _by_trainer_gone(r, rj, problems, seen):
    """run.json names its trainer (pid and start time: its identity) and that process is not
    the one seen working: certain, so failed. Another process found in the folder (a
    stranger's python, a reused pid) is not it, and makes the run neither running nor stalled."""
    rpid = _said_running(rj, seen.procs)
    if rpid and start_ticks(rj) is not None and seen.live_pid != rpid:
        r["state"] = "failed"
        problems.insert(0, f"run.json says running but pid {rpid} is gone (or now another process)")
        return True
    return False


def _by_live_process(r, rj, problems, seen):
    """A live process works in the run: running, or stalled when it has been silent too long."""
    if seen.live_pid is None:
        return False
    r["state"], r["pid"] = "running", seen.live_pid
    silent = seen.now - r["last_update"] if r["last_update"] else None
    sps = r["seconds_per_step"]
    if silent is not None and sps:
        limit = max(MIN_STALL_S, seen.stall_factor * sps, 2 * sps * seen.interval)
        if silent > limit:
            r["state"] = "stalled"
            problems.insert(0, f"no progress for {silent:.0f}s (step time {sps:.1f}s)")
    return True


def _by_pid_without_start_time(r, rj, problems, seen):
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


def _by_nothing(r, rj, problems, seen):
    """Nothing says what the run is: unknown, and why when no problem says it already."""
    if not problems:
        problems.append("no live process, no final adapter")
    return True


RULES = (
    _by_own_word,
    _by_final_adapter,
    _by_trainer_gone,
    _by_live_process,
    _by_pid_without_start_time,
    _by_nothing,
)


def decide(r, rj, problems, interval, live_pid, procs, stall_factor, now):
    """Decide run `r`'s state (the first of `RULES` that applies), its ETA and its reason."""
    seen = Seen(live_pid, procs, stall_factor, now, interval)
    for rule in RULES:
        if rule(r, rj, problems, seen):
            break
    # a stalled run has no ETA: its step time says nothing about when it will move again
    if (
        r["state"] == "running"
        and r["step"] is not None
        and r["max_steps"]
        and r["seconds_per_step"]
    ):
        r["eta_seconds"] = round(max(0, r["max_steps"] - r["step"]) * r["seconds_per_step"], 1)
    if r["state"] in ("unknown", "failed", "stalled") or problems:
        r["reason"] = "; ".join(problems) or None
