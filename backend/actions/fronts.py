"""One typed front per operation of each action helper: the request as its wire module declares
it (`backend/host/<helper>/wire.py`), the op string added here and nowhere else on the
controller's side, the answer held to its declared record (`backend/fleet/link/wire.py`)
before it is returned. A front raises what `HostLink.call` raises (HelperError when the helper
refused, HostError when the host could not be asked) and HostError `bad-answer` for an answer
that is not its record.

The schedules, seat check, holders and process fronts take `helper`, their callers' own name for the helper's
module (which a test points at a stand-in's source); the launch fronts take its bundle as
`source`. The resident mirror helpers are started by the copy engine: their fronts
here build each request line (`read_line`, `write_line`, ...) and hold each answer to its
record (`reader_started`, `writer_ready`, ...)."""

from __future__ import annotations

from typing import Any, TypeVar

from fleetdeck.backend.actions.launch.result import error_text
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.link.wire import checked
from fleetdeck.backend.host import holders as holders_main
from fleetdeck.backend.host import holders_wire, process_wire
from fleetdeck.backend.host import process as process_main
from fleetdeck.backend.host.launch import wire as launch_wire
from fleetdeck.backend.host.mirror import main as mirror_main
from fleetdeck.backend.host.mirror import wire as mirror_wire
from fleetdeck.backend.host.purge import main as purge_main
from fleetdeck.backend.host.purge import wire as purge_wire
from fleetdeck.backend.host.schedules import main as schedules_main
from fleetdeck.backend.host.schedules import wire as schedules_wire
from fleetdeck.backend.host.seat_check import main as seat_check_main
from fleetdeck.backend.host.seat_check import wire as seat_wire

PURGE = purge_main.__name__
MIRROR = mirror_main.__name__
SCHEDULES = schedules_main.__name__
SEAT_CHECK = seat_check_main.__name__
HOLDERS = holders_main.__name__
PROCESS = process_main.__name__

R = TypeVar("R")


async def _ask(
    link: HostLink,
    helper: str,
    op: str,
    req: Any,
    record: type[R],
    what: str,
    within: float | None = None,
) -> R:
    """One run of `helper` for `op` with `req` (bounded by `within`), its answer held to
    `record`; `what` names the helper in both the call's errors and the answer's refusal."""
    ans = await link.call(helper, op, within=within, what=what, **req)
    return checked(link.name, ans, record, what)


# -- purge -------------------------------------------------------------------------------------
async def purge_check(
    link: HostLink, req: purge_wire.CheckRequest, *, within: float | None = None
) -> purge_wire.Facts:
    """`check`: the facts a purge is judged on, gathered on the host, nothing changed."""
    return await _ask(link, PURGE, purge_wire.CHECK, req, purge_wire.Facts, "purge helper", within)


async def purge_execute(
    link: HostLink, req: purge_wire.ExecuteRequest, *, within: float | None = None
) -> purge_wire.Executed:
    """`execute`: the facts gathered and judged again, then each path removed against its pins."""
    return await _ask(
        link, PURGE, purge_wire.EXECUTE, req, purge_wire.Executed, "purge helper", within
    )


# -- mirror ------------------------------------------------------------------------------------
async def mirror_list(
    link: HostLink, req: mirror_wire.ListRequest, *, within: float | None = None
) -> mirror_wire.Listing:
    """`list`: a folder described (and hashed when asked) on its host."""
    return await _ask(
        link, MIRROR, mirror_wire.LIST, req, mirror_wire.Listing, "mirror helper", within
    )


async def mirror_abandon(
    link: HostLink, req: mirror_wire.AbandonRequest, *, within: float | None = None
) -> mirror_wire.Abandoned:
    """`abandon`: a mirror helper that no longer answers killed, its partial folder removed."""
    return await _ask(
        link, MIRROR, mirror_wire.ABANDON, req, mirror_wire.Abandoned, "mirror helper", within
    )


def read_line(req: mirror_wire.ReadRequest) -> dict[str, Any]:
    """The request line that starts a resident reader."""
    return {"op": mirror_wire.READ, **req}


def write_line(req: mirror_wire.WriteRequest) -> dict[str, Any]:
    """The request line that starts a resident writer."""
    return {"op": mirror_wire.WRITE, **req}


#: the lines that move a resident copy on: the writer told the frames ended, the reader told to
#: check its folder again, the writer told to put the copy in place
FINISH_LINE = {"op": mirror_wire.FINISH}
RECHECK_LINE = {"op": mirror_wire.RECHECK}
COMMIT_LINE = {"op": mirror_wire.COMMIT}


def reader_started(host: str, ans: dict[str, Any]) -> mirror_wire.ReaderStarted:
    """The reader's first answer (one that says ok) as its record."""
    return checked(host, ans, mirror_wire.ReaderStarted, "mirror reader")


def writer_ready(host: str, ans: dict[str, Any]) -> mirror_wire.WriterReady:
    """The writer's first answer (one that says ok) as its record."""
    return checked(host, ans, mirror_wire.WriterReady, "mirror writer")


def received(host: str, ans: dict[str, Any]) -> mirror_wire.Received:
    """The writer's answer to `finish` (one that says ok) as its record."""
    return checked(host, ans, mirror_wire.Received, "mirror writer")


def rechecked(host: str, ans: dict[str, Any]) -> mirror_wire.Rechecked:
    """The reader's answer to `recheck` (one that says ok) as its record."""
    return checked(host, ans, mirror_wire.Rechecked, "mirror reader")


def committed(host: str, ans: dict[str, Any]) -> mirror_wire.Committed:
    """The writer's answer to `commit` (one that says ok) as its record."""
    return checked(host, ans, mirror_wire.Committed, "mirror writer")


# -- schedules ---------------------------------------------------------------------------------
async def schedule_inspect(
    link: HostLink, req: schedules_wire.InspectRequest, *, helper: str = SCHEDULES
) -> schedules_wire.Inspected:
    """`inspect`: whether the entry is still what was listed, and what its removal needs."""
    return await _ask(
        link, helper, schedules_wire.INSPECT, req, schedules_wire.Inspected, "schedules helper"
    )


async def schedule_apply(
    link: HostLink,
    req: schedules_wire.ApplyRequest,
    *,
    within: float | None = None,
    helper: str = SCHEDULES,
) -> schedules_wire.Applied:
    """`apply`: the entry checked again, backed up, removed, and its absence witnessed."""
    return await _ask(
        link, helper, schedules_wire.APPLY, req, schedules_wire.Applied, "schedules helper", within
    )


# -- seat check --------------------------------------------------------------------------------
async def seat_check(
    link: HostLink,
    req: seat_wire.CheckRequest,
    *,
    within: float | None = None,
    helper: str = SEAT_CHECK,
) -> seat_wire.Checked:
    """`check`: one short completion asked of a seat on the host's 127.0.0.1, judged there."""
    return await _ask(link, helper, seat_wire.CHECK, req, seat_wire.Checked, "seat check", within)


# -- holders -----------------------------------------------------------------------------------
async def holders(
    link: HostLink,
    req: holders_wire.HoldersRequest,
    *,
    within: float | None = None,
    helper: str = HOLDERS,
) -> holders_wire.Holders:
    """`holders`: the processes holding a file under a path, read on the host, nothing changed."""
    return await _ask(
        link, helper, holders_wire.HOLDERS, req, holders_wire.Holders, "holders", within
    )


# -- process -----------------------------------------------------------------------------------
async def process_stop(
    link: HostLink,
    req: process_wire.StopRequest,
    *,
    within: float | None = None,
    helper: str = PROCESS,
) -> process_wire.Stopped:
    """`stop`: the process checked to be the one listed, signalled, and its outcome witnessed."""
    return await _ask(
        link, helper, process_wire.STOP, req, process_wire.Stopped, "process stop", within
    )


# -- launch ------------------------------------------------------------------------------------
def _launch_answer(host: str, ans: object) -> launch_wire.Launched:
    # a refusal answers with the checks too (ok false, the checks kept), held to the record
    # as well; an answer without checks is the helper failing before it checked anything
    if not isinstance(ans, dict) or "checks" not in ans:
        what = error_text(ans) if isinstance(ans, dict) else repr(ans)
        raise HostError(host, f"launch helper answered without checks: {what}", "helper")
    return checked(host, ans, launch_wire.Launched, "launch helper")


async def launch_preflight(
    link: HostLink, req: launch_wire.Request, *, source: str
) -> launch_wire.Launched:
    """`preflight`: every launch check on the host, nothing changed. `source`: the helper's
    payload (its bundle)."""
    ans = await link.run_helper(source, {"op": launch_wire.PREFLIGHT, **req})
    return _launch_answer(link.name, ans)


async def launch_start(
    link: HostLink, req: launch_wire.Request, *, source: str
) -> launch_wire.Launched:
    """`launch`: the checks again, then the run claimed and its supervisor started detached."""
    ans = await link.run_helper(source, {"op": launch_wire.LAUNCH, **req})
    return _launch_answer(link.name, ans)
