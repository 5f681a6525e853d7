"""Host side of "who holds this path": the processes that hold a file under a path open, mapped,
or as their cwd or root, read by purge's own in-use reader (`purge.inuse.scan_proc`), so the
answer here and a purge's `in-use` refusal are one judgement.

Runs on the host (stdlib + host library, Python 3.8+) through `HostLink.call` (its front:
`fronts.holders`; request and answer declared in `holders_wire`). Request:
`{"op": "holders", "path": "/abs/or/~path"}`. The path is absolute (or starts with `~`, which
expands here) without `.` or `..`; links in it are followed, since the question is about the
files it names. A folder is walked without following the links inside it (its files matched by
device and inode, so a hard link elsewhere counts); past MAX_ENTRIES entries the walk stops and
the answer says so (`complete: false`), as it does when a folder was skipped (deeper than
MAX_DEPTH, unreadable, or gone while walked): files not indexed are still matched by name (fds,
maps) but not by inode, and a cwd among them is not seen.
Answer: `{"path", "resolved", "kind": "directory" | "file", "entries": N, "complete": bool,
"processes": N (how many were read), "holders": [{"pid", "start", "user", "command", "comm",
"uses": [{"how": "fd" | "maps" | "cwd" | "root", "file"}], "more_uses": N}],
"unreadable": [{"pid", "comm", "error"}]}`. The query's own processes (this helper and the
login it runs under) are left out. Refusals: `not-absolute`, `not-normalized`, `not-found`, and
`too-many` / `too-big` for a path so wide that its holders do not fit one answer (`_bounded`).
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import json
import os
import pwd
import stat
import sys

from fleetdeck.backend.host.lib import flags, procfs
from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.purge.inuse import scan_proc
from fleetdeck.backend.host.purge.paths import WalkError, split_path

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Dict, List, Set, Tuple

    from fleetdeck.backend.host.holders_wire import Holder, Holders, HoldersRequest

    #: an open folder: its descriptor and the iterator over its entries
    Opened = Tuple[int, "os._ScandirIterator[str]"]

MAX_ENTRIES = 200000
#: folders deep the walk goes (a descriptor is open per level); deeper ones are not indexed
MAX_DEPTH = 256
#: uses listed per process (a trainer maps hundreds of shards); the rest are counted
MAX_USES = 20
COMMAND_CHARS = 512
#: holders one answer lists (what the controller takes), and the bytes of JSON they may take
#: (the channel carries 8 MiB; the rest of the answer fits in what is left)
MAX_HOLDERS = 4096
ANSWER_BUDGET = 4 << 20


def _index(real: str, st: os.stat_result) -> tuple[dict[tuple[int, int], int], bool]:
    """((dev, ino) -> 0 for the path and everything under it, complete). The walk is a loop,
    not a recursion (a folder nested thousands deep is a hostile host's layout, not a crash), at
    most MAX_DEPTH folders deep (one descriptor open per level) and MAX_ENTRIES entries; a folder
    that cannot be read, vanishes or is swapped while walked is skipped and the walk goes on
    (a trainer rotating its checkpoints does this under a run): `complete` is false then."""
    index = {(st.st_dev, st.st_ino): 0}
    if not stat.S_ISDIR(st.st_mode):
        return index, True
    complete = True
    stack: List[Opened] = []
    try:
        top = _opened(real, None, st)
        if top is None:
            return index, False
        stack.append(top)
        while stack:
            fd, entries = stack[-1]
            try:
                entry = next(entries, None)
            except OSError:
                entry, complete = None, False  # its listing broke while read (it went)
            if entry is None:
                stack.pop()
                _close(fd, entries)
                continue
            try:
                est = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                complete = False  # gone between the listing and its stat
                continue
            if len(index) >= MAX_ENTRIES:
                return index, False
            index.setdefault((est.st_dev, est.st_ino), 0)
            if stat.S_ISDIR(est.st_mode):
                sub = _opened(entry.name, fd, est) if len(stack) < MAX_DEPTH else None
                if sub is None:
                    complete = False
                else:
                    stack.append(sub)
    finally:
        for fd, entries in stack:
            _close(fd, entries)
    return index, complete


def _opened(name: str, dir_fd: int | None, est: os.stat_result) -> Opened | None:
    """(fd, iterator over its entries) of the folder `name` (under `dir_fd`, or absolute), never
    through a link and only while it is still the folder `est` was taken of; None otherwise."""
    try:
        fd = os.open(name, flags.DIR) if dir_fd is None else os.open(name, flags.DIR, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        sst = os.fstat(fd)
        if (sst.st_dev, sst.st_ino) == (est.st_dev, est.st_ino):
            return fd, os.scandir(fd)
    except OSError:
        pass
    os.close(fd)
    return None


def _close(fd: int, entries: os._ScandirIterator[str]) -> None:
    entries.close()
    os.close(fd)


def _user(uid: int | None) -> str:
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _bounded(listed: list[Holder], given: str) -> list[Holder]:
    """`listed` as one answer can carry it: at most MAX_HOLDERS holders (more is refused as
    `too-many`: a path as wide as / names every process), and within ANSWER_BUDGET bytes of
    JSON (past it each holder keeps its first use, the rest counted in `more_uses`; still past
    it, refused as `too-big`)."""
    if len(listed) > MAX_HOLDERS:
        raise Refused(
            "too-many",
            "%d processes hold a file under %s, more than one answer lists (%d): "
            "name a narrower path" % (len(listed), given, MAX_HOLDERS),
        )
    if len(json.dumps(listed)) <= ANSWER_BUDGET:
        return listed
    for r in listed:
        r["more_uses"] += len(r["uses"][1:])
        del r["uses"][1:]
    size = len(json.dumps(listed))
    if size > ANSWER_BUDGET:
        raise Refused(
            "too-big",
            "the holders of %s take %d MiB to list, more than one answer carries (%d MiB): "
            "name a narrower path" % (given, size >> 20, ANSWER_BUDGET >> 20),
        )
    return listed


def holders(req: HoldersRequest) -> Holders:
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
    anchor = procfs.session()
    by_pid: Dict[int, Holder] = {}
    gone: Set[int] = set()
    for h in found:
        pid = h["pid"]
        if pid in ours or pid in gone or procfs.in_session(pid, anchor):
            continue
        rec = by_pid.get(pid)
        if rec is None:
            start = procfs.start_ticks(pid)
            if start is None:  # gone while read: no identity to name it by
                gone.add(pid)
                continue
            rec = by_pid[pid] = {
                "pid": pid,
                "start": start,
                "user": _user(procfs.uid(pid)),
                "command": " ".join(procfs.cmdline(pid))[:COMMAND_CHARS],
                "comm": h["comm"],
                "uses": [],
                "more_uses": 0,
            }
        if len(rec["uses"]) < MAX_USES:
            rec["uses"].append({"how": h["how"], "file": h["file"]})
        else:
            rec["more_uses"] += 1
    listed = _bounded(list(by_pid.values()), given)
    return {
        "path": given,
        "resolved": real,
        "kind": "directory" if stat.S_ISDIR(st.st_mode) else "file",
        "entries": len(index),
        "complete": complete,
        "processes": len(procfs.pids()),
        "holders": listed,
        "unreadable": [
            {"pid": u["pid"], "comm": u["comm"], "error": u["error"]}
            for u in unreadable
            if not u.get("ancestor")
        ],
    }


#: the ops this helper answers, keyed by the op strings `holders_wire` declares (`HOLDERS`),
#: written out here so that the wire's typing is not imported on the host
OPS = {"holders": holders}

if __name__ == "__main__":
    sys.exit(serve(OPS))
