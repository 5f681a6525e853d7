"""systemd timers for the schedules helper: stopped (and disabled where they can be), then
re-read inactive and not enabled."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import re

from fleetdeck.backend.host.lib import crontab
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import shown_short
from fleetdeck.backend.host.schedules import common
from fleetdeck.backend.host.schedules.wire import Applied, ApplyRequest, Inspected, InspectRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Tuple

UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.timer$")


def _systemctl(s: Dict[str, Any]) -> List[str]:
    argv = ["systemctl"]
    if s.get("scope") == "user":
        argv.append("--user")
        if s.get("user") and s.get("user") != crontab.me():
            argv += ["--machine", "%s@" % s["user"]]
    return argv


def _timer_state(s: Dict[str, Any]) -> Tuple[str, Dict[str, str]]:
    unit = s.get("unit") or ""
    if not UNIT_RE.match(unit) or unit.startswith("-"):
        raise Refused("unsupported", "%s is not a timer unit name" % shown_short(unit))
    rc, out, err = common.run(
        _systemctl(s)
        + ["show", "-p", "LoadState", "-p", "ActiveState", "-p", "UnitFileState", "--", unit]
    )
    if rc != 0:
        raise Refused(
            "command-failed", "systemctl show %s failed: %s" % (unit, shown_short(err) or rc)
        )
    props = dict(x.split("=", 1) for x in out.decode("utf-8", "replace").splitlines() if "=" in x)
    if props.get("LoadState") != "loaded":
        raise Refused(
            "not-found", "timer %s is no longer loaded (%s)" % (unit, props.get("LoadState", "?"))
        )
    return unit, props


def inspect_timer(req: InspectRequest) -> Inspected:
    unit, props = _timer_state(req["schedule"])
    return {"state": props, "what": unit}


def apply_timer(req: ApplyRequest) -> Applied:
    s = req["schedule"]
    unit, props = _timer_state(s)
    if props.get("ActiveState") != "active" and not (props.get("UnitFileState") or "").startswith(
        "enabled"
    ):
        raise Refused(
            "nothing-to-remove",
            "timer %s is already %s and %s: nothing to stop or disable"
            % (
                unit,
                props.get("ActiveState") or "inactive",
                props.get("UnitFileState") or "not enabled",
            ),
        )
    how = ["disable", "--now"]
    if props.get("UnitFileState") == "enabled-runtime":
        how = ["disable", "--runtime", "--now"]
    note = ""
    if props.get("UnitFileState") in ("static", "transient", "runtime", "generated"):
        # such units cannot be disabled; stopping is all there is
        how = ["stop"]
        note = " (its unit file is %s: it cannot be disabled)" % props["UnitFileState"]
    rc, _, err = common.run(_systemctl(s) + how + ["--", unit])
    if rc != 0:
        raise Refused(
            "command-failed",
            "systemctl %s %s failed: %s" % (" ".join(how), unit, shown_short(err) or rc),
        )
    try:
        _, after = _timer_state(s)
    except Refused as e:
        if e.code != "not-found":
            raise
        after = {"LoadState": "not-found"}  # a stopped transient timer is unloaded: gone is done
    # enabled-runtime counts: it starts again at the next boot of this manager just the same
    if after.get("ActiveState") == "active" or (after.get("UnitFileState") or "").startswith(
        "enabled"
    ):
        raise Refused(
            "verify-failed",
            "timer %s is still %s/%s after %s"
            % (unit, after.get("ActiveState"), after.get("UnitFileState"), " ".join(how)),
        )
    done = "stopped" if how == ["stop"] else "stopped and disabled"
    said = "re-read, systemd says timer %s is %s" % (
        unit,
        ", ".join(
            "%s=%s" % (k, after[k])
            for k in ("LoadState", "ActiveState", "UnitFileState")
            if after.get(k)
        ),
    )
    return {
        "state": after,
        "witness": {
            "gone": True,
            "checked": "systemctl show %s" % unit,
            "state": after,
            "said": said,
        },
        "message": "timer %s %s%s (%s)" % (unit, done, note, said),
    }
