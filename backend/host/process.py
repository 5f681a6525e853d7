"""Host side of signalling one process from the Host view: checked, then the chosen signal.

Runs on the host (stdlib + host library, Python 3.8+) through `HostLink.call` (its front:
`fronts.process_stop`; request and answer declared in `process_wire`). Request:
`{"op": "stop", "pid": N, "start": TICKS, "command": "...", "grace": 10, "signal": "TERM"}`,
`signal` one of SIGNALS (TERM when absent). The process must still be the one listed: the same
pid, the same start time (`procfs.same_process`) and the same command line as the listing
showed; otherwise the answer is a refusal (`gone`, `changed`) and no signal is sent. Every
signal goes through a pidfd where the kernel has them, so a reused pid is never signalled.

What follows the signal, and the answer's `result`:
- TERM: SIGKILL if it is still there after `grace` seconds; `stopped` or `killed`.
- KILL: `killed`.
- INT, HUP (a trainer saves on INT; a daemon reloads on HUP): a short look; `stopped` when
  it went, else `signalled` (delivered, still running).
- STOP, CONT: `paused` once /proc says it is stopped (state T), `resumed` once it is not.
TERM, INT or HUP sent to a paused process is followed by CONT (listed in `signals`), so that
it can act on it: a paused trainer asked to end saves, as it would running.
A result that says the process went carries `"witness": {"pid", "start", "gone": true}`, /proc
re-read after the signal no longer holding that pid with that start time; one that says it
is still there carries `{"pid", "start", "gone": false, "state": S}`, S read from /proc after
the signal. `still-running` (TERM, KILL) and `unchanged` (STOP, CONT) are the outcomes not
reached. A process that ended before any signal reached it is refused (`gone`): nothing was
signalled. fleetdeck's own processes (the helper marker, and the login, shell or dashboard this
helper runs under) and pid 1 are refused (`ours`, `init`), an unknown signal is `bad-signal`.
The command line is compared joined as the probe lists it (one trailing NUL dropped, the other
NULs spaces).
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import signal
import sys
import time

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.serve import Refused, serve

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import List

    from fleetdeck.backend.host.process_wire import Stopped, StopRequest

MAX_GRACE = 300.0
#: the signals the Host view offers, by the name it shows
SIGNALS = {
    "TERM": signal.SIGTERM,
    "INT": signal.SIGINT,
    "HUP": signal.SIGHUP,
    "STOP": signal.SIGSTOP,
    "CONT": signal.SIGCONT,
    "KILL": signal.SIGKILL,
}
#: how long a signal whose effect is not the end of the process is watched for it (seconds)
SETTLE = 2.0
_STOPPED = ("T", "t")


def _checked(req: StopRequest) -> tuple[int, int, str]:
    """(pid, start, signal name) of a request naming the process the listing showed, or a
    refusal: nothing is signalled unless every check passed."""
    pid, start = req.get("pid"), req.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(start, int):
        raise Refused("bad-request", "a process is named by its pid and start time")
    name = req.get("signal", "TERM")
    if name not in SIGNALS:
        raise Refused("bad-signal", "signal %r is not one of %s" % (name, ", ".join(SIGNALS)))
    if pid == 1:
        raise Refused("init", "pid 1 is the host's init: never signalled from here")
    if not procfs.same_process(pid, start):
        raise Refused(
            "gone",
            "process %d is not the one listed any more (it ended, or its pid was reused)" % pid,
        )
    listed = str(req.get("command") or "")
    now = _command_line(pid)  # "" when gone or unreadable
    if not now or (listed and not now.startswith(listed)):
        raise Refused("changed", "process %d now runs another command than the one listed" % pid)
    if procfs.in_session(pid, procfs.session()):
        # known by descent from the controller's own session (pid and start time), never by a
        # marker another process could copy
        raise Refused("ours", "process %d is one of fleetdeck's own helpers" % pid)
    if pid == os.getpid() or pid in procfs.ancestors():
        # this helper's own chain: the login, shell or dashboard it runs under (the probe leaves
        # them out of its listing; a request naming one is refused, its answer would be lost)
        raise Refused("ours", "process %d is what this fleetdeck helper runs under" % pid)
    return pid, start, name


def _command_line(pid: int) -> str:
    """The command line of `pid` joined as the probe's listing joins it (`probe.common.Procs`):
    /proc/PID/cmdline with one trailing NUL dropped and every other NUL a space, so that an
    empty last argument or a title padded with NULs (setproctitle) compares as it was listed.
    "" when gone or unreadable."""
    try:
        raw = procfs.read_bytes("/proc/%d/cmdline" % pid)
    except OSError:
        return ""
    if raw.endswith(b"\0"):
        raw = raw[:-1]
    return raw.decode("utf-8", "surrogateescape").replace("\0", " ")


def stop(req: StopRequest) -> Stopped:
    pid, start, name = _checked(req)
    grace = req.get("grace", 10)
    grace = (
        min(MAX_GRACE, max(0.0, float(grace)))
        if isinstance(grace, (int, float)) and not isinstance(grace, bool)
        else 10.0
    )
    sent: List[str] = []
    try:
        if not procfs.signal_process(pid, start, SIGNALS[name]):
            raise Refused(
                "gone", "process %d ended before any signal reached it: nothing was signalled" % pid
            )
        sent.append("SIG" + name)
        if name in ("TERM", "INT", "HUP") and _state(pid, start) in _STOPPED:
            # a paused process acts on no signal until it runs again (the shell's kill and
            # systemd send CONT after TERM too): a paused trainer asked to end saves first,
            # rather than being killed once the grace is over
            if procfs.signal_process(pid, start, signal.SIGCONT):
                sent.append("SIGCONT")
        if name in ("TERM", "KILL"):
            return _terminated(pid, start, name, grace, sent)
        if name in ("INT", "HUP"):
            if procfs.wait_gone([(pid, start)], min(grace, SETTLE)):
                return _gone("stopped", pid, start, sent)
            return _alive("signalled", pid, start, sent)
        want_stopped = name == "STOP"
        if _wait_state(pid, start, want_stopped, SETTLE * 2):
            return _alive("paused" if want_stopped else "resumed", pid, start, sent)
        if not procfs.same_process(pid, start):
            return _gone("stopped", pid, start, sent)
        return _alive("unchanged", pid, start, sent)
    except PermissionError:
        raise Refused(
            "permission", "process %d belongs to another user; this login may not signal it" % pid
        ) from None


def _terminated(pid: int, start: int, name: str, grace: float, sent: list[str]) -> Stopped:
    """TERM (then KILL after `grace`) or KILL sent: wait for the process to go."""
    if name == "TERM":
        if procfs.wait_gone([(pid, start)], grace):
            return _gone("stopped", pid, start, sent)
        if procfs.signal_process(pid, start, signal.SIGKILL):
            sent.append("SIGKILL")
    if procfs.wait_gone([(pid, start)], 5.0):
        return _gone("killed", pid, start, sent)
    return {"result": "still-running", "signals": sent, "pid": pid}


def _state(pid: int, start: int) -> str | None:
    """The /proc state letter of (pid, start), or None when it is not that process any more."""
    st = procfs.stat(pid)
    return st[0] if st is not None and st[3] == start and st[0] not in ("Z", "X") else None


def _wait_state(pid: int, start: int, stopped: bool, seconds: float) -> bool:
    """True once (pid, start) is stopped (or, `stopped` false, running again) within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        state = _state(pid, start)
        if state is None:
            return False
        if (state in _STOPPED) == stopped:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _alive(result: str, pid: int, start: int, sent: list[str]) -> Stopped:
    """The answer for a process still there after its signal, with its state read again."""
    state = _state(pid, start)
    if state is None:
        return _gone("stopped", pid, start, sent)
    return {
        "result": result,
        "signals": sent,
        "pid": pid,
        "witness": {
            "pid": pid,
            "start": start,
            "gone": False,
            "state": state,
            "checked": "/proc/%d/stat" % pid,
        },
    }


def _gone(result: str, pid: int, start: int, sent: list[str]) -> Stopped:
    """The answer for a process that is gone, with its witness: /proc read once more."""
    if procfs.same_process(pid, start):  # never reached: wait_gone just said so
        return {"result": "still-running", "signals": sent, "pid": pid}
    return {
        "result": result,
        "signals": sent,
        "pid": pid,
        "witness": {"pid": pid, "start": start, "gone": True, "checked": "/proc/%d/stat" % pid},
    }


#: the ops this helper answers, keyed by the op strings `process_wire` declares (`STOP`),
#: written out here so that the wire's typing is not imported on the host
OPS = {"stop": stop}

if __name__ == "__main__":
    sys.exit(serve(OPS))
