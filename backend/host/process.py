"""Host side of stopping one process from the Host view: checked, then TERM, then KILL.

Runs on the host (stdlib + host library, Python 3.8+) through `HostLink.run_helper`. Request:
`{"op": "stop", "pid": N, "start": TICKS, "command": "...", "grace": 10}`. The process must
still be the one listed: the same pid, the same start time (`procfs.same_process`) and the same
command line as the listing showed; otherwise the answer is a refusal (`gone`, `changed`) and
no signal is sent. Then SIGTERM, and SIGKILL if it is still there after `grace` seconds; every
signal goes through a pidfd where the kernel has them, so a reused pid is never signalled.
Answer: `{"ok": true, "result": "stopped" | "killed" | "still-running", "signals": [...],
"witness": {"pid": N, "start": TICKS, "gone": true}}`: "stopped" and "killed" carry their
witness, /proc re-read after the signal no longer holding that pid with that start time. A
process that ended before any signal reached it is refused (`gone`): nothing was stopped.
fleetdeck's own processes (the helper marker) and pid 1 are refused (`ours`, `init`).
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import signal
import sys

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.serve import Refused, serve

MAX_GRACE = 300.0


def stop(req):
    pid, start = req.get("pid"), req.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(start, int):
        raise Refused("bad-request", "a process is named by its pid and start time")
    if pid == 1:
        raise Refused("init", "pid 1 is the host's init: never stopped from here")
    if not procfs.same_process(pid, start):
        raise Refused("gone", "process %d is not the one listed any more (it ended, or its pid was reused)" % pid)
    listed = str(req.get("command") or "")
    argv = procfs.cmdline(pid)   # [] when gone or unreadable
    if not argv or (listed and not " ".join(argv).startswith(listed)):
        raise Refused("changed", "process %d now runs another command than the one listed" % pid)
    if procfs.has_helper_marker(pid):
        raise Refused("ours", "process %d is one of fleetdeck's own helpers" % pid)
    grace = req.get("grace", 10)
    grace = min(MAX_GRACE, max(0.0, float(grace))) if isinstance(grace, (int, float)) and not isinstance(grace, bool) else 10.0
    sent = []
    try:
        if not procfs.signal_process(pid, start, signal.SIGTERM):
            raise Refused("gone", "process %d ended before any signal reached it: nothing was stopped" % pid)
        sent.append("SIGTERM")
        if procfs.wait_gone([(pid, start)], grace):
            return _gone("stopped", pid, start, sent)
        if procfs.signal_process(pid, start, signal.SIGKILL):
            sent.append("SIGKILL")
        if procfs.wait_gone([(pid, start)], 5.0):
            return _gone("killed", pid, start, sent)
    except PermissionError:
        raise Refused("permission", "process %d belongs to another user; this login may not signal it" % pid) from None
    return {"result": "still-running", "signals": sent, "pid": pid}


def _gone(result, pid, start, sent):
    """The answer for a process that is gone, with its witness: /proc read once more."""
    if procfs.same_process(pid, start):   # never reached: wait_gone just said so
        return {"result": "still-running", "signals": sent, "pid": pid}
    return {"result": result, "signals": sent, "pid": pid,
            "witness": {"pid": pid, "start": start, "gone": True, "checked": "/proc/%d/stat" % pid}}


if __name__ == "__main__":
    sys.exit(serve({"stop": stop}))
