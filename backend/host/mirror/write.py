"""The mirror helper's destination end: frames received into a hidden partial folder beside
the destination, fsynced and hashed again from this disk, then renamed into place (or in
the place of a destination it replaces) only when told; a writer that is gone is abandoned
and its partial folder removed. The destination's parent is opened once, from / without
following a link, and every step below it works relative to that descriptor (`Writer`).

This module answers `write` (`op_write`); beside it, `partial` holds the partial folder
(`Writer`, with its `replace` part), `fdops` what it does by descriptor, and `abandon` the
partial folders whose writer is gone."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
from concurrent.futures import ThreadPoolExecutor

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, shown
from fleetdeck.backend.host.mirror.common import (
    UNWRITABLE,
    Watchdog,
    ok,
    say,
)
from fleetdeck.backend.host.mirror.partial import Writer
from fleetdeck.backend.host.mirror.wire import COMMIT, FINISH

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, BinaryIO, Dict


def write_refusal(e: OSError) -> Refused:
    """A refusal for an OSError met while writing the destination."""
    where = " (%s)" % shown(os.fsencode(e.filename)) if e.filename else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return Refused("disk-full", "%s%s" % (e.strerror or e, where))
    if e.errno in UNWRITABLE:
        return Refused("dst-unwritable", "%s%s" % (e.strerror or e, where))
    return Refused("write-failed", "%s%s" % (e.strerror or e, where))


def op_write(req: Dict[str, Any], inp: BinaryIO, out: BinaryIO) -> Dict[str, Any]:
    """Receive frames into a partial folder; report hashes; commit or remove as told. A
    refusal says whether the partial folder was removed (`partial_removed`): once the parent's
    path leads elsewhere, only this writer, holding the folder's descriptor, can tell."""
    w = Writer(req)
    idle = req.get("idle")
    dog = Watchdog(on_fire=w.remove)
    try:
        stale = w.prepare()
        assert w.partial is not None  # prepare made it, or raised
        me = os.getpid()
        say(
            out,
            ok(
                partial=fsdec(w.partial),
                dst=fsdec(w.dst),
                stale_removed=stale,
                pid=me,
                start=procfs.start_ticks(me),
            ),
        )
        dog.arm(idle)
        threads = max(1, int(req.get("threads") or 4))
        with ThreadPoolExecutor(threads) as pool:
            hashed, found = w.receive(inp, req["files"], req.get("dirs", []), pool, dog, idle)
        dog.arm(idle)
        if json.loads(inp.readline() or b"{}").get("op") != FINISH:
            raise EOFError("no finish")
        say(out, ok(files=hashed, found=found))
        dog.arm(req.get("wait"))  # the controller re-checks the source meanwhile
        if json.loads(inp.readline() or b"{}").get("op") != COMMIT:
            w.remove()
            return {"aborted": True}
        dog.hold()
        w.commit()
        return {
            "committed": True,
            "free_bytes": w.free_bytes(),
            "kept_as": fsdec(w.backup) if w.backup is not None else None,
        }
    except EOFError:
        w.remove()  # the controller went away: nothing may stay behind
        raise Refused(
            "disconnected", "the controller's stream ended; the partial folder was removed"
        ) from None
    except Refused as e:
        e.extra["partial_removed"] = w.remove()
        raise
    except OSError as e:
        refusal = write_refusal(e)
        refusal.extra["partial_removed"] = w.remove()
        raise refusal from None
    finally:
        w.remove()
