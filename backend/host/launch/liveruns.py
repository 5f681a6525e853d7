"""Runs live on the training host, and launch's `live-run` check that a new run does not
share their GPUs (stdlib only, Python 3.8 or newer).
"""

from __future__ import annotations

import json
import os

from fleetdeck.backend.host.launch.resources import after_pid, check
from fleetdeck.backend.host.lib import procfs

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, Iterable, List, Optional

    from fleetdeck.backend.host.launch.wire import Check

TRAINER_MODULE = "fleetdeck.backend.train"


def trainer_processes() -> Dict[int, str]:
    """{pid: cwd} of processes running the trainer: `python -m fleetdeck.backend.train` or
    the `fleetdeck train` console script."""
    out: Dict[int, str] = {}
    me = os.getpid()
    for pid in procfs.pids():
        if pid == me:
            continue
        argv = procfs.cmdline(pid)
        hit = any(a == "-m" and argv[i + 1] == TRAINER_MODULE for i, a in enumerate(argv[:-1]))
        hit = hit or any(
            os.path.basename(a) == "fleetdeck" and argv[i + 1] == "train"
            for i, a in enumerate(argv[:-1])
        )
        if hit:
            try:
                out[pid] = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                out[pid] = "?"
    return out


def live_runs(roots: Iterable[str], seen: Iterable[Any] = ()) -> Dict[str, Optional[int]]:
    """{run folder: pid or None} of every run live on this host: those the probe saw running
    (`seen`, fleetdeck's own and others', e.g. a Hugging Face Trainer run), those whose
    run.json says running with that very process alive (pid and start time), and processes
    running the trainer."""
    out: Dict[str, Optional[int]] = {}
    for r in seen or ():
        if isinstance(r, dict) and r.get("path"):
            pid = r.get("pid")
            out[r["path"]] = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    for root in roots:
        root = os.path.abspath(os.path.expanduser(root))
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for n in names:
            try:
                with open(os.path.join(root, n, "run.json"), encoding="utf-8") as f:
                    m = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(m, dict) and m.get("state") == "running":
                if procfs.same_process(m.get("pid"), m.get("start_ticks")):
                    out[os.path.join(root, n)] = m.get("pid")
    known = set(out.values())
    for pid, cwd in trainer_processes().items():
        if pid not in known:
            out.setdefault(cwd, pid)
    return out


def _run_text(path: str, pid: Optional[int]) -> str:
    return f"{path} (pid {pid})" if pid else f"{path} (pid unknown)"


def check_live_runs(
    checks: List[Check],
    config: Dict[str, Any],
    gpus: Dict[str, Any],
    roots: Iterable[str],
    after: Optional[str],
    force: bool,
    seen: Iterable[Any] = (),
) -> Optional[bool]:
    """No other live run on the GPU(s) this run takes; on a CPU-only host, a note only."""
    runs = live_runs(roots, seen)
    prev = after_pid(after)
    waited = [p for p, pid in runs.items() if (after and p == after) or (prev and pid == prev)]
    runs = {path: pid for path, pid in runs.items() if path not in waited}
    # the run this one waits for is live too: said, so the line does not read "no other run"
    # right under "run-20 is running"
    but = f" but {waited[0]}, which this run waits for" if waited else ""
    if gpus["gpus"]:
        want = {g["uuid"] for g in gpus["gpus"][: int(config.get("gpus", 1))]}
        on_any = {p["pid"] for p in gpus["apps"]}
        on_ours = {p["pid"] for p in gpus["apps"] if p["uuid"] in want}
        # a run not (yet) on any GPU may still be loading, and one without a pid cannot be
        # placed: count them against ours
        clash = {
            path: pid
            for path, pid in runs.items()
            if pid is None or pid in on_ours or pid not in on_any
        }
        where = "GPU {}".format(
            ", ".join(str(g["index"]) for g in gpus["gpus"][: int(config.get("gpus", 1))])
        )
    else:
        # no GPU to share: CPU runs (tests, tiny models) only compete for cores, so say so and go on
        if not runs:
            return check(
                checks,
                "live-run",
                True,
                f"no GPU on this host, and no other run{but} is live on it",
            )
        desc = ", ".join(_run_text(path, pid) for path, pid in sorted(runs.items())[:3])
        return check(
            checks, "live-run", True, f"no GPU on this host; {desc} also live here, sharing its CPU"
        )
    if not clash:
        return check(checks, "live-run", True, f"no other run{but} is live on {where}")
    desc = ", ".join(_run_text(path, pid) for path, pid in sorted(clash.items())[:3])
    if force:
        return check(
            checks, "live-run", True, f"{desc} live on {where}; --force given, starting anyway"
        )
    check(
        checks,
        "live-run",
        False,
        "{} {} live on {}; wait for it, or pass --force to share".format(
            desc, "is" if len(clash) == 1 else "are", where
        ),
    )
    return None
