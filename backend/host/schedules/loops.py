"""Stopping a loop for the schedules helper: a process (and what it started, and its process
group) verified by pid and start time, frozen with SIGSTOP so its family cannot grow, then
ended with SIGTERM and, after the grace, SIGKILL; done only when none of them is left."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import signal

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import shown_short
from fleetdeck.backend.host.schedules.wire import Applied, ApplyRequest, Inspected, InspectRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Tuple

    #: processes by identity: (pid, start ticks)
    Procs = List[Tuple[int, int]]

SHELLS = procfs.SHELLS


def _loop_target(s: Dict[str, Any]) -> Tuple[int, int]:
    pid, start = s.get("pid"), s.get("start_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(start, int) or pid <= 1:
        raise Refused("unsupported", "the listing gave no pid and start time for this loop")
    st = procfs.stat(pid)
    if st is None or st[0] in ("Z", "X"):
        raise Refused("not-found", "process %d has already exited" % pid)
    if not procfs.same_process(pid, start):
        raise Refused(
            "changed-since-listing",
            "pid %d now belongs to another process (start time %d, listed %d)"
            % (pid, st[3], start),
        )
    if pid == os.getpid() or pid in procfs.ancestors():
        raise Refused("unsupported", "process %d is this helper or one of its parents" % pid)
    return pid, start


def _tty_nr(pid: int) -> int:
    st = procfs.stat(pid)
    return st[5] if st else 0


def _interactive(pid: int) -> Tuple[bool, Optional[str], List[str]]:
    argv = procfs.cmdline(pid)
    try:
        fd0 = os.readlink("/proc/%d/fd/0" % pid)
    except OSError:
        fd0 = ""
    prog = os.path.basename(argv[0]).lstrip("-") if argv else ""
    login = bool(argv) and argv[0].startswith("-")
    on_tty = _tty_nr(pid) != 0 and (fd0.startswith("/dev/pts/") or fd0.startswith("/dev/tty"))
    shell = prog in SHELLS and "-c" not in argv[1:]
    return bool(login or (shell and on_tty)), fd0 if on_tty else None, argv[:20]


def loop_family(pid: int, group: Optional[int] = None) -> Procs:
    """[(pid, start ticks)] of what stopping loop `pid` ends: its descendants, and the members
    of process group `group` (the loop's own, when it leads one: a child orphaned by an
    earlier iteration stays in it). Never this helper or its parents."""
    mine = set(procfs.ancestors()) | {os.getpid()}
    found = [p for p in procfs.descendants(pid) if p not in mine]
    if group:
        for p in procfs.pids():
            if p != pid and p not in found and p not in mine:
                ps = procfs.stat(p)
                if ps is not None and ps[2] == group:
                    found.append(p)
    out: Procs = []
    for p in found:
        t = procfs.start_ticks(p)
        if t is not None and procfs.alive(p):
            out.append((p, t))
    return out


def _group_of(pid: int) -> Optional[int]:
    """The loop's process group when it leads one (and it is not this helper's), else None."""
    st = procfs.stat(pid)
    return pid if st is not None and st[2] == pid and os.getpgrp() != pid else None


def _family_json(family: Procs) -> List[Dict[str, Any]]:
    return [
        {
            "pid": p,
            "start_time": t,
            "command": shown_short(" ".join(procfs.cmdline(p)) or procfs.comm(p), 200),
        }
        for p, t in family
    ]


def inspect_loop(req: InspectRequest) -> Inspected:
    pid, start = _loop_target(req["schedule"])
    interactive, tty, argv = _interactive(pid)
    return {
        "interactive": interactive,
        "tty": tty,
        "argv": argv,
        "what": "process %d" % pid,
        "children": _family_json(loop_family(pid, _group_of(pid))),
    }


_signal = procfs.signal_process
_wait_gone = procfs.wait_gone


def _freeze(pid: int, start: int, group: Optional[int], frozen: Procs) -> Procs:
    """SIGSTOP the loop, then everything below it (and in its group), until nothing new
    appears: a stopped process starts no child, so the family cannot grow while it is
    signalled. Adds to `frozen` ([(pid, start)], the loop first)."""
    if (pid, start) not in frozen and _signal(pid, start, signal.SIGSTOP):
        frozen.append((pid, start))
    for _ in range(50):
        new = [f for f in loop_family(pid, group) if f not in frozen]
        if not new:
            return frozen
        for p, t in new:
            if _signal(p, t, signal.SIGSTOP):
                frozen.append((p, t))
    return frozen


def _send(procs: Procs, sig: int) -> bool:
    return any([_signal(p, t, sig) for p, t in procs])


def apply_loop(req: ApplyRequest) -> Applied:
    """Stop the loop and every process it started; done only when none of them is left."""
    pid, start = _loop_target(req["schedule"])
    interactive, tty, argv = _interactive(pid)
    grace = req.get("grace", 5.0)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 3600:
        raise Refused(
            "bad-request",
            "grace must be a number of seconds from 0 to 3600, not %s" % shown_short(str(grace)),
        )
    group = _group_of(pid)
    sent: List[str] = []
    tried: List[str] = []  # terminating signals attempted, even when one of them failed
    everyone: Procs = []
    try:
        _freeze(pid, start, group, everyone)
        if (pid, start) not in everyone:
            everyone.insert(0, (pid, start))
        tried.append("SIGTERM")
        if _send(everyone, signal.SIGTERM):
            sent.append("SIGTERM")
        _send(everyone, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
        if not _wait_gone(everyone, grace):
            _freeze(pid, start, group, everyone)  # what it started since, then no more
            tried.append("SIGKILL")
            if _send(everyone, signal.SIGKILL):
                sent.append("SIGKILL")
        # an orphan left in the loop's group (its parent gone) is still the loop's
        late = loop_family(pid, group) if group else []
        if late:
            everyone += [f for f in late if f not in everyone]
            if _send(late, signal.SIGKILL) and "SIGKILL" not in sent:
                sent.append("SIGKILL")
        if not _wait_gone(everyone, 10.0):
            left = [p for p, t in everyone if procfs.same_process(p, t)]
            raise Refused(
                "still-running",
                "process %s survived SIGKILL" % ", ".join(map(str, left)),
                survivors=left,
            )
    except PermissionError:
        _send(everyone, signal.SIGCONT)
        if tried:
            # some of the family was already signalled: not a clean refusal
            raise Refused(
                "partly-stopped",
                "not allowed to signal every process of loop %d after %s; "
                "list the host again" % (pid, " then ".join(tried)),
            ) from None
        raise Refused(
            "permission-denied", "not allowed to signal process %d or one of its children" % pid
        ) from None
    family = [(p, t) for p, t in everyone if p != pid]
    how = " then ".join(sent) or "no signal (it had already exited)"
    msg = "process %d stopped with %s" % (pid, how)
    if family:
        msg += ", with the %d process%s it started (%s); none is left" % (
            len(family),
            "" if len(family) == 1 else "es",
            ", ".join(str(p) for p, _ in family),
        )
    if interactive:
        msg += "; it was an interactive shell on %s, whose session has closed" % (
            tty or "a terminal"
        )
    left = [p for p, t in everyone if procfs.same_process(p, t)]
    if left:  # never reached: wait_gone just said none is left
        raise Refused(
            "still-running",
            "process %s survived SIGKILL" % ", ".join(map(str, left)),
            survivors=left,
        )
    said = "re-read, /proc holds none of the %d process%s (pid with its start time) it stopped" % (
        len(everyone),
        "" if len(everyone) == 1 else "es",
    )
    return {
        "interactive": interactive,
        "tty": tty,
        "argv": argv,
        "signals": sent,
        "message": "%s (%s)" % (msg, said),
        "children": [{"pid": p, "start_time": t} for p, t in family],
        "witness": {
            "gone": True,
            "checked": "/proc",
            "said": said,
            "processes": [{"pid": p, "start_time": t} for p, t in everyone],
        },
    }
