"""Stop one process of a host, as the Host view lists it: its pid and program typed back as the
pop-up shows them, the host's helper re-checks that it is still that process, and the outcome
is audited. "stopped" stands only with its witness: the host re-read /proc after the signal
and the pid with the listed start time is gone."""

from __future__ import annotations

from dataclasses import dataclass

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.models import Process
from fleetdeck.backend.fleet.ssh import HostLink
from fleetdeck.backend.host import process as process_helper
from fleetdeck.backend.host.lib.text import shown

HELPER = process_helper.__name__


def confirmation(p: Process) -> str:
    """What the operator types to stop `p`: its pid and its program's name (`4242 python3`),
    exactly as the pop-up shows it: a name holding control characters or undecodable bytes is
    typed escaped (`4903 \\x1b[2J\\nevil`), as it is displayed, never as raw bytes no one can
    type."""
    prog = p.command.split(" ", 1)[0].rsplit("/", 1)[-1] or "?"
    return f"{p.pid} {shown(prog)}"


def _witnessed(ans: dict, p: Process) -> bool:
    """True when the helper's answer names the stopped process's witness: this pid with this
    start time, gone."""
    w = ans.get("witness")
    return isinstance(w, dict) and w.get("pid") == p.pid and w.get("start") == p.start and w.get("gone") is True


@dataclass(frozen=True)
class StopReport:
    """What became of one stop: `ok` when the process is gone."""

    ok: bool
    result: str
    message: str
    reason_code: str | None = None


async def stop_process(link: HostLink, p: Process, typed: str, grace: float = 10.0,
                       via: str = "dashboard") -> StopReport:
    """Stop `p` on `link`'s host once `typed` is exactly `confirmation(p)`; audited."""
    if typed != confirmation(p):
        rep = StopReport(False, "refused", f"typed {typed!r}, not {confirmation(p)!r}", "not-confirmed")
    else:
        try:
            ans = await link.call(HELPER, "stop", pid=p.pid, start=p.start, command=p.command, grace=grace,
                                  within=grace + 30, what="process stop")
        except HelperError as e:
            rep = StopReport(False, "refused", str(e.error.get("message") or "the host refused"),
                             str(e.error.get("code") or "helper"))
        except HostError as e:
            rep = StopReport(False, "failed", e.message, e.code)
        else:
            result = str(ans.get("result"))
            signals = ", ".join(str(s) for s in ans.get("signals") or []) or "no signal"
            if result not in ("stopped", "killed"):
                rep = StopReport(False, result, f"process {p.pid} {result} ({signals})")
            elif not _witnessed(ans, p):
                rep = StopReport(False, "failed", f"the host said process {p.pid} {result} ({signals}) but named "
                                 f"no witness (pid {p.pid} with start time {p.start} gone): not taken as stopped; "
                                 "look at the host again", "no-witness")
            else:
                rep = StopReport(True, result, f"process {p.pid} {result} ({signals}): pid {p.pid} with start "
                                 f"time {p.start} is gone from the host's /proc")
    try:
        audit.audit("process-stop", link.name, "done" if rep.ok else rep.result, pid=p.pid, start=p.start,
                    command=p.command[:300], outcome=rep.result, reason=rep.reason_code, message=rep.message,
                    via=via)
    except OSError:
        pass
    return rep
