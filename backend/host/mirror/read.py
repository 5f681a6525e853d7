"""The mirror helper's listing and source end: a folder described (and hashed), its files
streamed as frames with a sha256 each, then the folder re-checked against the listing the
copy was planned from."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import queue
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

from fleetdeck.backend.host.lib import hashing, procfs
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, fsenc, shown
from fleetdeck.backend.host.mirror.common import (
    CHUNK,
    HDR,
    ChainError,
    Watchdog,
    file_facts,
    free_bytes,
    hash_rel,
    host_path,
    kind_of,
    lstat_or_none,
    ok,
    open_dir_chain,
    open_rel,
    say,
    walk,
)
from fleetdeck.backend.host.mirror.wire import RECHECK, Listing, ListRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, BinaryIO, Dict, Iterable, List, Optional, Sequence, Tuple


def boot_id() -> Optional[str]:
    """This kernel's boot id: random for every boot of every machine, the same in every
    container on it; None when it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read(64).strip().decode("ascii", "replace") or None
    except OSError:
        return None


def disk_identity(path: bytes) -> Dict[str, Any]:
    """What says which folder `path` is on this kernel's disks: the boot id, and the (st_dev,
    st_ino) of the folder the kernel reaches at `path` (links in any parent and bind mounts
    followed, as every access would), then of each folder above it up to /. `self` is False
    when `path` does not exist (the chain then starts at the nearest folder above it). Two
    paths with the same boot id and the same (st_dev, st_ino) are one folder, whatever their
    names or the fleet entries they were reached through."""
    chain: List[List[int]] = []
    here = True
    p = os.path.realpath(path)
    while True:
        try:
            st = os.stat(p)
            chain.append([st.st_dev, st.st_ino])
        except OSError:
            if not chain:
                here = False
        if p in (b"/", b""):
            break
        p = os.path.dirname(p)
    return {"boot": boot_id(), "chain": chain, "self": here}


def parent_link(folder: bytes) -> Optional[str]:
    """A sentence naming the first symlink met walking `folder` from / without following
    one (a mirror writes only through real folders), or None (no link; a component missing
    is no link: the writer creates it)."""
    try:
        os.close(open_dir_chain(folder))
    except ChainError as e:
        return e.detail if e.code == "symlink" else None
    return None


def op_list(req: ListRequest) -> Listing:
    """Describe (and with `hash`, hash) the folder at req["path"] on this host."""
    root = host_path(req["path"])
    st = lstat_or_none(root)
    kind = kind_of(st)
    follow = bool(req.get("follow"))
    if kind == "symlink" and follow:
        try:
            kind = kind_of(os.stat(root))
        except OSError:
            kind = "dangling"
    res: Listing = {
        "path": fsdec(root),
        "real": fsdec(os.path.realpath(root)),
        "kind": kind,
        "dev": st.st_dev if st else None,
        "ino": st.st_ino if st else None,
        "disk": disk_identity(root),
        "mode": stat.S_IMODE(st.st_mode) if st else None,
        "free_bytes": free_bytes(root),
        "parent_dev": None,
        "parent_link": parent_link(os.path.dirname(root)),
    }
    pst = lstat_or_none(os.path.dirname(root))
    res["parent_dev"] = pst.st_dev if pst else None
    if kind != "dir":
        return res
    found = walk(root, follow, bool(req.get("skip_partials")))
    res["files"] = found["files"]
    res["dirs"] = found["dirs"]
    res["symlinks"] = found["symlinks"]
    res["special"] = found["special"]
    res["errors"] = found["errors"]
    res["partials"] = found["partials"]
    res["outside"] = found["outside"]
    if req.get("hash") and res["files"]:
        threads = max(1, min(int(req.get("threads") or 8), len(res["files"])))
        with ThreadPoolExecutor(threads) as pool:
            hashed = pool.map(lambda f: hash_rel(root, f["path"], follow), res["files"])
            for f, h in zip(res["files"], hashed):  # noqa: B905 (strict= is 3.10+; hosts run 3.8)
                f.update(h)
    return res


# -- read: the source end of a copy -------------------------------------------------------------
def source_error(e: OSError, rel: str) -> Refused:
    """A refusal for an OSError met while reading the source file `rel`."""
    why = e.strerror or str(e)
    if e.errno in (errno.EACCES, errno.EPERM):
        return Refused("src-unreadable", "cannot read %s: %s" % (shown(rel), why))
    if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
        return Refused(
            "source-changed", "%s: %s (it changed since it was listed)" % (shown(rel), why)
        )
    return Refused("read-failed", "reading %s failed: %s" % (shown(rel), why))


def listed_facts(f: Dict[str, Any]) -> List[int]:
    return [f["bytes"], f["mtime_ns"], f["ctime_ns"], f["ino"]]


def op_read(req: Dict[str, Any], inp: BinaryIO, out: BinaryIO) -> Dict[str, Any]:
    """Stream req["files"] as frames with a sha256 trailer each; then, on request, re-check
    the whole folder against the listing the copy was planned from (see `recheck`)."""
    root = host_path(req["path"])
    follow = bool(req.get("follow"))
    files = req["files"]
    q: queue.Queue[Tuple[Optional[bytes], Any]] = queue.Queue(maxsize=8)
    idle = req.get("idle")
    dog = Watchdog()
    dog.arm(idle)
    me = os.getpid()
    say(out, ok(pid=me, start=procfs.start_ticks(me)))

    def produce() -> None:
        # reading and hashing here overlaps with writing to the channel in the main thread
        for f in files:
            try:
                fd = open_rel(root, fsenc(f["path"]), follow)
            except OSError as e:
                q.put((None, source_error(e, f["path"])))
                return
            try:
                if file_facts(os.fstat(fd)) != listed_facts(f):
                    q.put(
                        (
                            None,
                            Refused(
                                "source-changed",
                                "%s changed since it was listed (size, "
                                "mtime, ctime or inode)" % shown(f["path"]),
                            ),
                        )
                    )
                    return
                digest, n = hashing.sha256_fd(fd, CHUNK, lambda chunk: q.put((chunk, None)))
                if file_facts(os.fstat(fd)) != listed_facts(f):
                    q.put(
                        (
                            None,
                            Refused(
                                "source-changed", "%s changed while it was read" % shown(f["path"])
                            ),
                        )
                    )
                    return
                q.put((None, ok(sha256=digest, bytes=n)))
            except OSError as e:
                q.put((None, source_error(e, f["path"])))
                return
            finally:
                os.close(fd)

    threading.Thread(target=produce, daemon=True).start()
    sent: Dict[str, str] = {}
    for f in files:
        while True:
            chunk, trailer = q.get()
            if chunk is None:
                break
            out.write(HDR.pack(len(chunk)))
            out.write(chunk)
            dog.arm(idle)
        out.write(HDR.pack(0))
        if isinstance(trailer, Refused):
            out.flush()
            raise trailer  # its answer is this file's trailer
        sent[f["path"]] = trailer["sha256"]
        say(out, trailer)
        dog.arm(idle)
    dog.arm(req.get("wait"))
    cmd = json.loads(inp.readline() or b"{}")
    dog.disarm()
    if cmd.get("op") != RECHECK:
        raise Refused("bad-request", "expected a recheck request")
    return {
        "changed": recheck(
            root,
            follow,
            files,
            req.get("dirs") or [],
            sent,
            [o[0] for o in req.get("outside") or []],
        )
    }


def recheck(
    root: bytes,
    follow: bool,
    files: Sequence[Dict[str, Any]],
    dirs: Sequence[Sequence[Any]],
    sent: Dict[str, str],
    outside: Iterable[str] = (),
) -> List[List[str]]:
    """[[path, why]] for everything in the folder that is not as listed when the copy was
    planned: a file, folder, link or special file that appeared or went, or a file whose
    size, mtime, ctime or inode differs and whose bytes, hashed again now, are not the
    bytes that were sent. ctime cannot be set by a user, so restoring an mtime with utime
    does not hide a rewrite."""
    now = walk(root, follow, False)
    changed = [[p, why] for p, why in now["errors"]]
    changed += [
        [p, "it now points outside the folder, to %s" % shown(t)]
        for p, t in now["outside"]
        if p not in outside
    ]
    changed += [
        [p, "a symlink or special file appeared during the copy"]
        for p in now["symlinks"] + now["special"]
    ]
    was_dirs, now_dirs = set(d[0] for d in dirs), set(d[0] for d in now["dirs"])
    changed += [[p, "this folder appeared during the copy"] for p in sorted(now_dirs - was_dirs)]
    changed += [[p, "this folder went away during the copy"] for p in sorted(was_dirs - now_dirs)]
    current = dict((f["path"], f) for f in now["files"])
    for f in files:
        g = current.pop(f["path"], None)
        if g is None:
            changed.append([f["path"], "it went away during the copy"])
        elif listed_facts(g) != listed_facts(f):
            h = hash_rel(root, f["path"], follow)
            if (
                h.get("sha256") is None
                or h["sha256"] != sent.get(f["path"])
                or h["bytes"] != f["bytes"]
            ):
                changed.append([f["path"], "its bytes changed during the copy"])
    changed += [[p, "it appeared during the copy"] for p in sorted(current)]
    return changed
