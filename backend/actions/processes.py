"""Signal one process of a host, as the Host view lists it: its pid and program typed back as
the pop-up shows them, the host's helper re-checks that it is still that process, sends the
chosen signal (TERM by default: `SIGNALS`), and the outcome is audited with the signal's name.
"stopped" stands only with its witness: the host re-read /proc after the signal and the pid
with the listed start time is gone; "paused" and "resumed" only with the state the host read
after the signal (stopped, or not)."""

from __future__ import annotations

from dataclasses import dataclass

from fleetdeck.backend.actions import fronts
from fleetdeck.backend.actions.audit_records import StopRecord, write
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Process
from fleetdeck.backend.host import process as process_helper
from fleetdeck.backend.host import process_wire
from fleetdeck.backend.host.lib.text import shown

HELPER = process_helper.__name__
#: the signals offered, in the order the pop-up lists them, with what each does
SIGNALS = {
    "TERM": "ask it to end; KILL after the grace",
    "INT": "as ctrl-c: a trainer saves and ends",
    "HUP": "hang up: a daemon reloads",
    "STOP": "pause it where it is (CONT resumes)",
    "CONT": "resume a paused process",
    "KILL": "end it now, no chance to save",
}


def confirmation(p: Process) -> str:
    """What the operator types to stop `p`: its pid and its program's name (`4242 python3`),
    exactly as the pop-up shows it: a name holding control characters or undecodable bytes is
    typed escaped (`4903 \\x1b[2J\\nevil`), as it is displayed, never as raw bytes no one can
    type."""
    prog = p.command.split(" ", 1)[0].rsplit("/", 1)[-1] or "?"
    return f"{p.pid} {shown(prog)}"


#: what each result needs its witness to say: gone (True), there (False) with a state in the set
_WITNESS = {
    "stopped": (True, None),
    "killed": (True, None),
    "signalled": (False, None),
    "paused": (False, {"T", "t"}),
    "resumed": (False, None),
}


def _witnessed(ans: process_wire.Stopped, p: Process, result: str) -> bool:
    """True when the helper's answer names the witness `result` needs: this pid with this start
    time, gone (stopped, killed) or there (signalled, paused in state T, resumed not in T)."""
    w = ans.get("witness")
    gone, states = _WITNESS[result]
    if not (
        isinstance(w, dict)
        and w.get("pid") == p.pid
        and w.get("start") == p.start
        and w.get("gone") is gone
    ):
        return False
    state = w.get("state")
    if gone:
        return True
    if not isinstance(state, str):
        return False
    return state in states if states else (result != "resumed" or state not in {"T", "t"})


def _said(ans: process_wire.Stopped, p: Process, result: str, signals: str) -> str:
    """The sentence for a witnessed outcome."""
    if _WITNESS[result][0]:
        return f"process {p.pid} {result} ({signals}): pid {p.pid} with start time {p.start} is gone from the host's /proc"
    state = ans["witness"]["state"]
    if result == "signalled":
        return f"{signals} delivered to process {p.pid}; it is still running (state {state} in the host's /proc)"
    return f"process {p.pid} {result} ({signals}): the host's /proc says state {state}"


@dataclass(frozen=True)
class StopReport:
    """What became of one signal: `ok` when its outcome is witnessed (gone, paused, resumed, or
    delivered and still running for INT and HUP)."""

    ok: bool
    result: str
    message: str
    reason_code: str | None = None


async def stop_process(
    link: HostLink,
    p: Process,
    typed: str,
    grace: float = 10.0,
    via: str = "dashboard",
    signal: str = "TERM",
) -> StopReport:
    """Send `signal` (a key of SIGNALS) to `p` on `link`'s host once `typed` is exactly
    `confirmation(p)`; audited."""
    if signal not in SIGNALS:
        rep = StopReport(
            False, "refused", f"signal {signal!r} is not one of {', '.join(SIGNALS)}", "bad-signal"
        )
    elif typed != confirmation(p):
        rep = StopReport(
            False, "refused", f"typed {typed!r}, not {confirmation(p)!r}", "not-confirmed"
        )
    else:
        try:
            ans = await fronts.process_stop(
                link,
                {
                    "pid": p.pid,
                    "start": p.start,
                    "command": p.command,
                    "grace": grace,
                    "signal": signal,
                },
                within=grace + 30,
                helper=HELPER,
            )
        except HelperError as e:
            rep = StopReport(
                False,
                "refused",
                str(e.error.get("message") or "the host refused"),
                str(e.error.get("code") or "helper"),
            )
        except HostError as e:
            rep = StopReport(False, "failed", e.message, e.code)
        else:
            rep = _outcome(ans, p)
    try:
        write(
            StopRecord(
                host=link.name,
                result="done" if rep.ok else rep.result,
                pid=p.pid,
                start=p.start,
                command=p.command[:300],
                signal=signal,
                outcome=rep.result,
                reason=rep.reason_code,
                message=rep.message,
                via=via,
            )
        )
    except OSError:
        pass
    return rep


def _outcome(ans: process_wire.Stopped, p: Process) -> StopReport:
    """The report of the helper's answer: ok only for a result with its witness."""
    result = str(ans.get("result"))
    signals = ", ".join(str(s) for s in ans.get("signals") or []) or "no signal"
    if result not in _WITNESS:
        return StopReport(False, result, f"process {p.pid} {result} ({signals})")
    if not _witnessed(ans, p, result):
        return StopReport(
            False,
            "failed",
            f"the host said process {p.pid} {result} ({signals}) but named "
            f"no witness (pid {p.pid} with start time {p.start} {'gone' if _WITNESS[result][0] else 'there, in its new state'}): "
            f"not taken as {result}; look at the host again",
            "no-witness",
        )
    return StopReport(True, result, _said(ans, p, result, signals))
