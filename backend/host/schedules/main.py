"""Host side of schedule removal: stdlib + the host library, Python 3.8+.

Run through `HostLink.run_helper("fleetdeck.backend.host.schedules.main", request)`; each
kind of schedule has its module beside this one (`cron`, `timers`, `at`, `loops`), and each
op's request and answer are declared in `wire`.
Request: `{"op": "inspect" | "apply", "schedule": {...}, ...}`; the answer is the host
library's one shape (`serve`): the op's fields with `"ok": true`, or
`{"ok": false, "error": {"code", "message", ...}}`.

`inspect` checks that the entry is still what was listed and returns what the controller needs
before anything changes (the whole crontab / cron file for its backup, and its sha256; the
processes a loop stop will end); `apply` re-checks, writes the host-side backup, changes
exactly one thing, and verifies the result. Nothing here goes through a shell: every command
is an argv list, every string arrives as JSON on stdin.

Every `apply` that succeeds names its witness, what it re-read after the change and found
gone: `{"witness": {"gone": true, "checked": ..., "said": SENTENCE, ...}}` (the crontab or
file re-read one line shorter and byte for byte the edited text; the timer's state re-read
inactive and not enabled; `at -c` finding no job; none of the loop's processes left in /proc).
An entry with nothing to remove is refused `nothing-to-remove`: a listed line that is blank, a
comment or a variable assignment, a timer already inactive and not enabled.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import sys

from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.lib.text import shown_short
from fleetdeck.backend.host.schedules.at import apply_at, inspect_at
from fleetdeck.backend.host.schedules.cron import apply_lines, inspect_lines
from fleetdeck.backend.host.schedules.loops import apply_loop, inspect_loop
from fleetdeck.backend.host.schedules.timers import apply_timer, inspect_timer
from fleetdeck.backend.host.schedules.wire import APPLY, INSPECT

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Callable

KINDS = {
    "crontab": (inspect_lines, apply_lines),
    "cron-file": (inspect_lines, apply_lines),
    "systemd-timer": (inspect_timer, apply_timer),
    "at": (inspect_at, apply_at),
    "loop": (inspect_loop, apply_loop),
}


def _by_kind(which: int) -> Callable[[Any], Any]:
    def op(req: Any) -> Any:  # InspectRequest or ApplyRequest, by `which`
        s = req.get("schedule")
        kind = s.get("kind") if isinstance(s, dict) else None
        fns = KINDS.get(kind) if isinstance(kind, str) else None
        if fns is None:
            raise Refused(
                "unsupported",
                "cannot %s a schedule of kind %s"
                % (("inspect", "apply")[which], shown_short(str(kind))),
            )
        try:
            return fns[which](req)
        except OSError as e:
            raise Refused(
                "command-failed", "%s: %s" % (e.strerror or e, shown_short(e.filename or ""))
            ) from None

    return op


OPS = {INSPECT: _by_kind(0), APPLY: _by_kind(1)}

if __name__ == "__main__":
    sys.exit(serve(OPS))
