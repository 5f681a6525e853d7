"""The probe's evidence of which live process works in a run: its cwd inside the run, the run
named in its argv, or a file under the run held open (the fd scan, at most every FD_SCAN_EVERY
seconds, last poll's holder checked alone first)."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Iterable

from fleetdeck.backend.host.probe.common import BYSTANDERS, FD_SCAN_EVERY, STATE, Procs


def evidence(
    procs: Procs, run_paths: Iterable[str], wanted: Collection[str], fresh: bool, now: float
) -> dict[str, int]:
    """{run path: pid} for runs a live process works in: cwd inside, named in argv, or a file open."""
    roots = tuple(sorted({os.path.dirname(p) + "/" for p in run_paths}))
    run_set = set(run_paths)

    def run_of(p: str) -> str | None:
        if p.startswith(roots):
            for root in roots:
                if p.startswith(root):
                    cand = root + p[len(root) :].split("/", 1)[0]
                    if cand in run_set:
                        return cand
        return None

    # argv can only name a run if it holds the run's folder name: one regex search per process
    named = re.compile("|".join(re.escape(os.path.basename(r)) for r in sorted(wanted)))
    found = {}  # type: dict
    workers = []
    for pid in sorted(procs.others()):
        if procs.prog[pid] in BYSTANDERS or procs.ours(pid):
            continue
        workers.append(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = None
        hits = {run_of(cwd)} if cwd else set()
        for a in procs.argv(pid)[1:] if named.search(procs.raw[pid]) else ():
            for s in (a, a.partition("=")[2]):
                if s and ("/" in s or s in (".", "..")):
                    s = os.path.normpath(
                        s if s.startswith("/") or not cwd else os.path.join(cwd, s)
                    )
                    hits.add(run_of(s))
        for run in hits:
            if run and run in wanted:
                found.setdefault(run, pid)
    missing = [r for r in wanted if r not in found]
    holders = STATE["holders"]
    for run in list(missing):  # last poll's holder, checked alone: cheap and usually still true
        h = holders.get(run)
        if h and procs.alive(h[0], h[1]) and run in _open_runs(h[0], run_of):
            found[run] = h[0]
            missing.remove(run)
    if missing and (fresh or now - STATE["fd_scan_at"] >= FD_SCAN_EVERY):
        STATE["fd_scan_at"] = now
        for pid in workers:
            for run in _open_runs(pid, run_of):
                if run in missing and run not in found:
                    found[run] = pid
                    st = procs.stat(pid)
                    holders[run] = (pid, st[1] if st else None)
    return found


def _open_runs(pid: int, run_of: Callable[[str], str | None]) -> set[str]:
    out = set()  # type: set
    d = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(d)
    except OSError:
        return out
    for fd in fds:
        try:
            p = os.readlink(d + "/" + fd)
        except OSError:
            continue
        if p.startswith("/"):
            run = run_of(p)
            # the final adapter is what serving processes map; that is use, not training
            if run and not p.startswith(run + "/adapter/"):
                out.add(run)
    return out
