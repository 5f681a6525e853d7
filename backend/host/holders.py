"""Host side of "who holds this path": the processes that hold a file under a path open, mapped,
or as their cwd or root, read by purge's own in-use reader (`purge.facts.scan_proc`), so the
answer here and a purge's `in-use` refusal are one judgement.

Runs on the host (stdlib + host library, Python 3.8+) through `HostLink.call`. Request:
`{"op": "holders", "path": "/abs/or/~path"}`. The path is absolute (or starts with `~`, which
expands here) without `.` or `..`; links in it are followed, since the question is about the
files it names. A folder is walked without following the links inside it (its files matched by
device and inode, so a hard link elsewhere counts); past MAX_ENTRIES entries the walk stops and
the answer says so (`complete: false`): files beyond are still matched by name (fds, maps) but
not by inode, and a cwd below them is not seen.
Answer: `{"path", "resolved", "kind": "directory" | "file", "entries": N, "complete": bool,
"processes": N (how many were read), "holders": [{"pid", "start", "user", "command", "comm",
"uses": [{"how": "fd" | "maps" | "cwd" | "root", "file"}], "more_uses": N}],
"unreadable": [{"pid", "comm", "error"}]}`. The query's own processes (this helper and the
login it runs under) are left out. Refusals: `not-absolute`, `not-normalized`, `not-found`.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import pwd
import stat
import sys

from fleetdeck.backend.host.lib import flags, procfs
from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.purge.facts import scan_proc
from fleetdeck.backend.host.purge.paths import WalkError, scan, split_path

MAX_ENTRIES = 200000
#: uses listed per process (a trainer maps hundreds of shards); the rest are counted
MAX_USES = 20
COMMAND_CHARS = 512


class _Full(Exception):
    """The walk reached MAX_ENTRIES."""


def _index(real, st):
    """((dev, ino) -> 0 for the path and everything under it, complete)."""
    index = {(st.st_dev, st.st_ino): 0}
    if not stat.S_ISDIR(st.st_mode):
        return index, True

    def visit(path, name, est):
        if len(index) >= MAX_ENTRIES:
            raise _Full()
        index.setdefault((est.st_dev, est.st_ino), 0)

    fd = os.open(real, flags.DIR)
    try:
        scan(fd, real.rstrip("/"), visit)
    except _Full:
        return index, False
    except OSError:
        # a folder that changed or cannot be read while walked: what was indexed still counts
        return index, False
    finally:
        os.close(fd)
    return index, True


def _user(uid):
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def holders(req):
    given = req.get("path")
    if not isinstance(given, str) or not given:
        raise Refused("bad-request", "name a path")
    try:
        absolute, _ = split_path(given)
    except WalkError as e:
        raise Refused(e.code, "%s: %s" % (given, e.detail)) from None
    real = os.path.realpath(absolute)
    try:
        st = os.stat(real)
    except OSError as e:
        raise Refused("not-found", "%s cannot be read: %s" % (given, e.strerror)) from None
    index, complete = _index(real, st)
    found, unreadable = scan_proc(index, [real])
    ours = set(procfs.ancestors()) | {os.getpid()}
    by_pid = {}
    for h in found:
        pid = h["pid"]
        if pid in ours or procfs.has_helper_marker(pid):
            continue
        rec = by_pid.get(pid)
        if rec is None:
            rec = by_pid[pid] = {"pid": pid, "start": procfs.start_ticks(pid), "user": _user(procfs.uid(pid)),
                                 "command": " ".join(procfs.cmdline(pid))[:COMMAND_CHARS], "comm": h["comm"],
                                 "uses": [], "more_uses": 0}
        if len(rec["uses"]) < MAX_USES:
            rec["uses"].append({"how": h["how"], "file": h["file"]})
        else:
            rec["more_uses"] += 1
    return {"path": given, "resolved": real, "kind": "directory" if stat.S_ISDIR(st.st_mode) else "file",
            "entries": len(index), "complete": complete, "processes": len(procfs.pids()),
            "holders": [r for r in by_pid.values() if r["start"] is not None],
            "unreadable": [{"pid": u["pid"], "comm": u["comm"], "error": u["error"]}
                           for u in unreadable if not u.get("ancestor")]}


if __name__ == "__main__":
    sys.exit(serve({"holders": holders}))
