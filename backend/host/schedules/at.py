"""at jobs for the schedules helper: removed with atrm once `at -c` still shows the listed
command, then `at -c` finds no such job."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsenc, shown_short
from fleetdeck.backend.host.schedules import common
from fleetdeck.backend.host.schedules.wire import Applied, ApplyRequest, Inspected, InspectRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, Tuple


def _at_job(s: Dict[str, Any]) -> Tuple[str, bytes]:
    job = str(s.get("job") or "")
    if not job.isdigit():
        raise Refused("unsupported", "%s is not an at job number" % shown_short(job))
    rc, out, err = common.run(["at", "-c", job])
    if rc != 0:
        raise Refused("not-found", "at job %s no longer exists" % job)
    want = (s.get("command") or "").strip()
    if not want or fsenc(want) not in out:
        raise Refused("changed-since-listing", "at job %s no longer runs the listed command" % job)
    return job, out


def inspect_at(req: InspectRequest) -> Inspected:
    job, out = _at_job(req["schedule"])
    return {"sha256": common.sha(out), "what": "at job %s" % job}


def apply_at(req: ApplyRequest) -> Applied:
    job, out = _at_job(req["schedule"])
    if common.sha(out) != req.get("sha256"):
        raise Refused("changed-since-listing", "at job %s changed after it was checked" % job)
    rc, _, err = common.run(["atrm", job])
    if rc != 0:
        raise Refused("command-failed", "atrm %s failed: %s" % (job, shown_short(err) or rc))
    if common.run(["at", "-c", job])[0] == 0:
        raise Refused("verify-failed", "at job %s still exists after atrm" % job)
    said = "re-read, at -c %s finds no such job" % job
    return {
        "witness": {"gone": True, "checked": "at -c %s" % job, "said": said},
        "message": "at job %s removed (%s)" % (job, said),
    }
