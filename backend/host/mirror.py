"""The mirror helper that runs ON a host: stdlib and the host library only, Python 3.8+.

It travels over SSH as a bundle (`fleetdeck.backend.fleet.bundle`) and its input is JSON on stdin, so
no path is ever pasted into a shell string. The first line of stdin is the request; every
answer has the host library's one shape (`{..., "ok": true}` or `{"ok": false, "error":
{"code", "message"}}`):

- `list`: every file under a folder (size, mtime_ns, ctime_ns, inode, mode), optionally hashed,
  files in parallel threads (hashlib releases the GIL), plus the folders, symlinks and special
  files found. Without `follow` nothing is followed, the folder itself included; with it,
  links are followed and those pointing outside the folder are named.
- `read`: stream files as frames (4-byte big-endian length, data; length 0 ends a file, then
  one answer line: the sha256 of the bytes read from this disk), then re-check the folder on
  request.
- `write`: receive those frames into a hidden partial folder beside the destination, fsync each
  file, hash it again from this disk, and rename into place only when told to commit. Any
  error, an abort, or stdin closing (the controller or its connection died) removes the
  partial folder; a partial left by a writer that is gone is removed by the next writer.

Paths travel as str decoded from the file system's bytes with utf-8/surrogateescape, so any
name (non-UTF-8 bytes included) goes back to the same bytes.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import queue
import random
import re
import shutil
import signal
import stat
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fleetdeck.backend.host.lib import fsinfo, hashing, procfs, serve
from fleetdeck.backend.host.lib.files import write_all
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, fsenc, shown

CHUNK = 1 << 20
# Bytes written between two fdatasync calls: the final fsync of a file then flushes at most
# this much, so a disk doing 2 MB/s still answers within a 30 s command_timeout.
SYNC_EVERY = 64 << 20
HDR = struct.Struct(">I")
PARTIAL = b".fleetdeck-partial-"
# what follows PARTIAL in a name a writer made: PID-START-RANDOM (PID-RANDOM from older ones)
PARTIAL_TAG = re.compile(rb"^[0-9]+-(?:[0-9]+-)?[0-9a-f]{8}$")
RDFLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
DIRFLAGS = RDFLAGS | os.O_DIRECTORY | os.O_NOFOLLOW
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def is_partial(name):
    """True for the name of a partial folder a writer made inside a destination."""
    return name.startswith(PARTIAL) and PARTIAL_TAG.match(name[len(PARTIAL):]) is not None


def say(out, obj):
    """Write one answer line (the host library's JSON; undecodable names kept)."""
    out.write(serve.dumps(obj).encode("utf-8", "surrogateescape") + b"\n")
    out.flush()


def ok(**fields):
    fields["ok"] = True
    return fields


class Watchdog:
    """The helper's own no-progress timeout: a thread that ends the process when the
    controller has neither sent nor taken anything for `limit` seconds (the controller was
    stopped, or its connection hangs without closing), after running `on_fire` (the writer
    removes its partial folder). Armed and disarmed by the main thread; `hold()` keeps it
    from firing during a commit."""

    def __init__(self, on_fire=None):
        self.deadline = None
        self.lock = threading.Lock()
        self.held = False
        self.on_fire = on_fire
        t = threading.Thread(target=self._watch, daemon=True)
        t.start()

    def arm(self, limit):
        self.deadline = None if not limit else time.monotonic() + float(limit)

    def disarm(self):
        self.deadline = None

    def hold(self):
        with self.lock:
            self.held = True

    def _watch(self):
        while True:
            d = self.deadline
            time_left = 1.0 if d is None else d - time.monotonic()
            if time_left <= 0:
                with self.lock:
                    if self.held or self.deadline is None or self.deadline > time.monotonic():
                        continue
                    try:
                        sys.stderr.write("mirror helper: nothing moved for too long; stopping\n")
                        sys.stderr.flush()
                        if self.on_fire is not None:
                            self.on_fire()
                    finally:
                        os._exit(3)
            time.sleep(min(1.0, max(0.05, time_left)))


def host_path(p):
    """`~` expands on this host; a relative path is relative to where the session starts."""
    b = os.path.expanduser(fsenc(p))
    if not b.startswith(b"/"):
        b = os.path.join(os.getcwdb(), b)
    while len(b) > 1 and b.endswith(b"/"):
        b = b[:-1]
    return b


def kind_of(st):
    if st is None:
        return None
    m = st.st_mode
    if stat.S_ISLNK(m):
        return "symlink"
    if stat.S_ISDIR(m):
        return "dir"
    if stat.S_ISREG(m):
        return "file"
    return "other"


def lstat_or_none(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def open_rel(root, rel, follow):
    """Open root/rel for reading; without `follow`, a symlink at any component (root
    included) is refused with ELOOP."""
    if follow:
        return os.open(os.path.join(root, rel), RDFLAGS)
    parts = rel.split(b"/")
    fd = os.open(root, DIRFLAGS)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, DIRFLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], RDFLAGS | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def file_facts(st):
    """What says a file is unchanged: size, mtime, ctime (no user can set it), inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def walk(root, follow, skip_partials):
    """Everything under root, as relative paths, sorted by kind. With `follow`, symlinks are
    followed and each one whose target lies outside root is named in `outside`."""
    out = {"files": [], "dirs": [], "symlinks": [], "special": [], "errors": [], "partials": [],
           "outside": []}
    seen = set()
    real_root = os.path.realpath(root)
    stack = [b""]
    while stack:
        rel = stack.pop()
        full = os.path.join(root, rel) if rel else root
        try:
            with os.scandir(full) as it:
                entries = list(it)
        except OSError as e:
            out["errors"].append([fsdec(rel), e.strerror or str(e)])
            continue
        for ent in entries:
            r = os.path.join(rel, ent.name) if rel else ent.name
            if skip_partials and not rel and is_partial(ent.name) and ent.is_dir(follow_symlinks=False):
                out["partials"].append(fsdec(r))
                continue
            try:
                st = os.lstat(ent.path)
                if stat.S_ISLNK(st.st_mode):
                    if not follow:
                        out["symlinks"].append(fsdec(r))
                        continue
                    st = os.stat(ent.path)
                    target = os.path.realpath(ent.path)
                    if target != real_root and not target.startswith(real_root.rstrip(b"/") + b"/"):
                        out["outside"].append([fsdec(r), fsdec(target)])
            except OSError as e:
                out["errors"].append([fsdec(r), e.strerror or str(e)])
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if follow and key in seen:
                    out["errors"].append([fsdec(r), "directory loop through a symlink"])
                    continue
                seen.add(key)
                out["dirs"].append([fsdec(r), stat.S_IMODE(st.st_mode)])
                stack.append(r)
            elif stat.S_ISREG(st.st_mode):
                out["files"].append({"path": fsdec(r), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
                                     "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
                                     "mode": stat.S_IMODE(st.st_mode)})
            else:
                out["special"].append(fsdec(r))
    out["files"].sort(key=lambda f: f["path"])
    out["dirs"].sort()
    return out


def hash_rel(root, rel, follow):
    """sha256 of root/rel read from this disk, or an error sentence."""
    try:
        fd = open_rel(root, fsenc(rel), follow)
    except OSError as e:
        return {"sha256": None, "error": e.strerror or str(e)}
    try:
        st = os.fstat(fd)
        digest, n = hashing.sha256_fd(fd)
        if n != st.st_size:
            return {"sha256": None, "error": "changed while it was hashed"}
        return {"sha256": digest, "bytes": n}
    except OSError as e:
        return {"sha256": None, "error": e.strerror or str(e)}
    finally:
        os.close(fd)


def free_bytes(path):
    """Free bytes on the file system holding `path` (or the nearest folder above it that
    exists); None when it cannot be told."""
    while True:
        try:
            return fsinfo.free_bytes(path)
        except (FileNotFoundError, NotADirectoryError):
            if path in (b"/", b""):
                return None
            path = os.path.dirname(path)
        except OSError:
            return None


def boot_id():
    """This kernel's boot id: random for every boot of every machine, the same in every
    container on it; None when it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read(64).strip().decode("ascii", "replace") or None
    except OSError:
        return None


def disk_identity(path):
    """What says which folder `path` is on this kernel's disks: the boot id, and the (st_dev,
    st_ino) of the folder the kernel reaches at `path` (links in any parent and bind mounts
    followed, as every access would), then of each folder above it up to /. `self` is False
    when `path` does not exist (the chain then starts at the nearest folder above it). Two
    paths with the same boot id and the same (st_dev, st_ino) are one folder, whatever their
    names or the fleet entries they were reached through."""
    chain, here = [], True
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


def op_list(req):
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
    res = {"path": fsdec(root), "real": fsdec(os.path.realpath(root)), "kind": kind,
           "dev": st.st_dev if st else None, "ino": st.st_ino if st else None,
           "disk": disk_identity(root),
           "mode": stat.S_IMODE(st.st_mode) if st else None, "free_bytes": free_bytes(root)}
    pst = lstat_or_none(os.path.dirname(root))
    res["parent_dev"] = pst.st_dev if pst else None
    if kind != "dir":
        return res
    res.update(walk(root, follow, bool(req.get("skip_partials"))))
    if req.get("hash") and res["files"]:
        threads = max(1, min(int(req.get("threads") or 8), len(res["files"])))
        with ThreadPoolExecutor(threads) as pool:
            hashed = pool.map(lambda f: hash_rel(root, f["path"], follow), res["files"])
            for f, h in zip(res["files"], hashed):  # noqa: B905 (strict= is 3.10+; hosts run 3.8)
                f.update(h)
    return res


# -- read: the source end of a copy -------------------------------------------------------------
def source_error(e, rel):
    """A refusal for an OSError met while reading the source file `rel`."""
    why = e.strerror or str(e)
    if e.errno in (errno.EACCES, errno.EPERM):
        return Refused("src-unreadable", "cannot read %s: %s" % (shown(rel), why))
    if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
        return Refused("source-changed", "%s: %s (it changed since it was listed)" % (shown(rel), why))
    return Refused("read-failed", "reading %s failed: %s" % (shown(rel), why))


def listed_facts(f):
    return [f["bytes"], f["mtime_ns"], f["ctime_ns"], f["ino"]]


def op_read(req, inp, out):
    """Stream req["files"] as frames with a sha256 trailer each; then, on request, re-check
    the whole folder against the listing the copy was planned from (see `recheck`)."""
    root = host_path(req["path"])
    follow = bool(req.get("follow"))
    files = req["files"]
    q = queue.Queue(maxsize=8)
    idle = req.get("idle")
    dog = Watchdog()
    dog.arm(idle)
    me = os.getpid()
    say(out, ok(pid=me, start=procfs.start_ticks(me)))

    def produce():
        # reading and hashing here overlaps with writing to the channel in the main thread
        for f in files:
            try:
                fd = open_rel(root, fsenc(f["path"]), follow)
            except OSError as e:
                q.put((None, source_error(e, f["path"])))
                return
            try:
                if file_facts(os.fstat(fd)) != listed_facts(f):
                    q.put((None, Refused("source-changed", "%s changed since it was listed (size, "
                                         "mtime, ctime or inode)" % shown(f["path"]))))
                    return
                digest, n = hashing.sha256_fd(fd, CHUNK, lambda chunk: q.put((chunk, None)))
                if file_facts(os.fstat(fd)) != listed_facts(f):
                    q.put((None, Refused("source-changed", "%s changed while it was read"
                                         % shown(f["path"]))))
                    return
                q.put((None, ok(sha256=digest, bytes=n)))
            except OSError as e:
                q.put((None, source_error(e, f["path"])))
                return
            finally:
                os.close(fd)

    threading.Thread(target=produce, daemon=True).start()
    sent = {}
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
    if cmd.get("op") != "recheck":
        raise Refused("bad-request", "expected a recheck request")
    return {"changed": recheck(root, follow, files, req.get("dirs") or [], sent,
                               [o[0] for o in req.get("outside") or []])}


def recheck(root, follow, files, dirs, sent, outside=()):
    """[[path, why]] for everything in the folder that is not as listed when the copy was
    planned: a file, folder, link or special file that appeared or went, or a file whose
    size, mtime, ctime or inode differs and whose bytes, hashed again now, are not the
    bytes that were sent. ctime cannot be set by a user, so restoring an mtime with utime
    does not hide a rewrite."""
    now = walk(root, follow, False)
    changed = [[p, why] for p, why in now["errors"]]
    changed += [[p, "it now points outside the folder, to %s" % shown(t)]
                for p, t in now["outside"] if p not in outside]
    changed += [[p, "a symlink or special file appeared during the copy"]
                for p in now["symlinks"] + now["special"]]
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
            if h.get("sha256") is None or h["sha256"] != sent.get(f["path"]) or h["bytes"] != f["bytes"]:
                changed.append([f["path"], "its bytes changed during the copy"])
    changed += [[p, "it appeared during the copy"] for p in sorted(current)]
    return changed


# -- write: the destination end of a copy -------------------------------------------------------
def partial_in_use(name_rest):
    """True when the writer named in a partial folder's name (`PID-START-RANDOM`) still runs.

    The one identity rule (pid and start ticks) says whether it is the same process; a name
    from an older writer (`PID-RANDOM`, no start time) is in use only while that pid is a
    live fleetdeck helper."""
    parts = name_rest.split(b"-")
    try:
        pid = int(parts[0])
        start = int(parts[1]) if len(parts) >= 3 else None
    except (ValueError, IndexError):
        return True  # not a name we made: leave it alone
    if pid == os.getpid():
        return True
    if start is None:
        return procfs.alive(pid) and procfs.has_helper_marker(pid)
    if not procfs.same_process(pid, start):
        return False
    # another user's helper hides its environment from us: keep its folder
    return procfs.has_helper_marker(pid) or procfs.uid(pid) != os.getuid()


def clean_stale(folder, prefix):
    """Remove partial folders whose writer is gone; the names removed."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix) or partial_in_use(name[len(prefix):]):
            continue
        path = os.path.join(folder, name)
        if kind_of(lstat_or_none(path)) == "dir":
            remove_tree(path)
            removed.append(fsdec(path))
    return removed


def read_exact(inp, n):
    """Exactly n bytes, or EOFError: the controller went away mid-frame."""
    data = inp.read(n)
    if data is None or len(data) != n:
        raise EOFError("input ended")
    return data


class Writer:
    """The partial folder for one destination, and how to fill, commit or remove it."""

    def __init__(self, req):
        self.dst = host_path(req["path"])
        self.name = os.path.basename(self.dst)
        if self.name in (b"", b".", b".."):
            raise Refused("bad-path", "the destination must name a folder")
        self.parent = os.path.dirname(self.dst)
        self.partial = None
        self.inside = False
        self.root_mode = req.get("mode")
        #: replacing an existing destination: its pin [dev, ino] as compared, and the name
        #: it is kept under once the new copy takes its place
        self.replace = req.get("replace")
        self.backup = None
        if self.replace is not None:
            self.backup = fsenc(self.replace["backup"])
            if (os.path.dirname(self.backup) != self.parent
                    or os.path.basename(self.backup) in (b"", b".", b"..", self.name)):
                raise Refused("bad-path", "the name for the replaced destination must be beside it")
        self.pfd = None

    def prepare(self):
        st = lstat_or_none(self.dst)
        kind = kind_of(st)
        if self.replace is not None:
            return self.prepare_replace(st, kind)
        if kind == "symlink":
            raise Refused("dst-symlink", "the destination is a symlink")
        if kind not in (None, "dir"):
            raise Refused("dst-not-a-directory", "the destination exists and is not a folder")
        try:
            os.makedirs(self.parent, exist_ok=True)
        except OSError as e:
            raise Refused("dst-unwritable", "cannot create %s: %s" % (shown(self.parent), e.strerror)) \
                from None
        prefix = b"." + self.name + PARTIAL
        stale = clean_stale(self.parent, prefix)
        me = os.getpid()
        tag = b"%d-%d-%08x" % (me, procfs.start_ticks(me) or 0, random.getrandbits(32))
        if kind == "dir":
            stale += clean_stale(self.dst, PARTIAL)
            if [n for n in os.listdir(self.dst) if not is_partial(n)]:
                raise Refused("dst-not-empty", "the destination is no longer empty")
            # a mount point cannot be renamed over: fill a partial folder inside it instead
            self.inside = st.st_dev != os.lstat(self.parent).st_dev
        if self.inside:
            self.partial = os.path.join(self.dst, PARTIAL + tag)
        else:
            base = prefix[:255 - len(tag)] + tag if len(prefix) + len(tag) > 255 else prefix + tag
            self.partial = os.path.join(self.parent, base)
        try:
            os.mkdir(self.partial, 0o700)
        except OSError as e:
            if e.errno in UNWRITABLE:
                self.partial = None
                where = self.dst if self.inside else self.parent
                raise Refused("dst-unwritable", "cannot write in %s: %s" % (shown(where), e.strerror)) \
                    from None
            raise
        return stale

    def prepare_replace(self, st, kind):
        """A partial folder beside a destination that exists and will be replaced; the
        destination must still be the folder that was compared (its pin)."""
        if kind != "dir" or [st.st_dev, st.st_ino] != list(self.replace["pin"]):
            raise Refused("dst-changed", "the destination is no longer the folder that was compared; "
                          "nothing was changed")
        pst = os.lstat(self.parent)
        if st.st_dev != pst.st_dev:
            raise Refused("dst-mounted", "the destination is a mount point, which cannot be renamed "
                          "aside; replace what is inside it by hand")
        if os.path.lexists(self.backup):
            raise Refused("dst-changed", "%s already exists; nothing was changed" % shown(self.backup))
        prefix = b"." + self.name + PARTIAL
        stale = clean_stale(self.parent, prefix)
        me = os.getpid()
        tag = b"%d-%d-%08x" % (me, procfs.start_ticks(me) or 0, random.getrandbits(32))
        base = prefix[:255 - len(tag)] + tag if len(prefix) + len(tag) > 255 else prefix + tag
        self.partial = os.path.join(self.parent, base)
        try:
            os.mkdir(self.partial, 0o700)
        except OSError as e:
            self.partial = None
            if e.errno in UNWRITABLE:
                raise Refused("dst-unwritable", "cannot write in %s: %s" % (shown(self.parent), e.strerror)) \
                    from None
            raise
        return stale

    def receive(self, inp, files, dirs, pool, dog, idle):
        for rel, _mode in sorted(dirs, key=lambda d: d[0].count("/")):
            os.mkdir(os.path.join(self.partial, fsenc(rel)), 0o700)
        futures = []
        for f in files:
            path = os.path.join(self.partial, fsenc(f["path"]))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                dirty = 0
                while True:
                    (n,) = HDR.unpack(read_exact(inp, 4))
                    if n == 0:
                        break
                    write_all(fd, read_exact(inp, n))
                    dirty += n
                    if dirty >= SYNC_EVERY:
                        # the final fsync of a big file must not outlast the no-progress limit
                        os.fdatasync(fd)
                        dirty = 0
                    dog.arm(idle)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.utime(path, ns=(f["mtime_ns"], f["mtime_ns"]), follow_symlinks=False)
            # hashed again from this disk while the next file arrives
            futures.append(pool.submit(hash_rel, self.partial, f["path"], False))
        dog.disarm()  # hashing the last files: the controller bounds this wait itself
        hashed = [fut.result() for fut in futures]
        # the source's modes only now: a read-only file or folder must not stop the hashing
        for f in files:
            os.chmod(os.path.join(self.partial, fsenc(f["path"])), f["mode"])
        for rel, mode in dirs:
            os.chmod(os.path.join(self.partial, fsenc(rel)), mode)
        fsync_tree(self.partial)
        # what is really in the partial folder now, folders and strays included
        found = walk(self.partial, False, False)
        return hashed, {"files": [f["path"] for f in found["files"]],
                        "dirs": [d[0] for d in found["dirs"]],
                        "other": found["symlinks"] + found["special"]}

    def swap(self):
        """Put the verified partial folder in the destination's place, the destination kept
        under `backup`: first the destination is renamed aside, then the partial folder takes
        its name, each rename refusing to replace anything (renameat2 RENAME_NOREPLACE), the
        folder fsynced after each. A failure of the second rename puts the destination back;
        whatever happens, the original is under its own name or under `backup`, never gone.
        (RENAME_EXCHANGE would leave no instant without a destination, but a writer killed
        right after it would leave the original under the partial folder's name, which the
        next writer removes as stale: losing it is worse than a moment without the name.)"""
        pfd = os.open(self.parent, DIRFLAGS)
        part = os.path.basename(self.partial)
        back = os.path.basename(self.backup)
        try:
            try:
                st = os.stat(self.name, dir_fd=pfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is None or not stat.S_ISDIR(st.st_mode) or \
                    [st.st_dev, st.st_ino] != list(self.replace["pin"]):
                raise Refused("dst-changed", "the destination changed during the copy; it was not "
                              "replaced")
            if self.root_mode is not None:
                os.chmod(self.partial, self.root_mode)
            try:
                rename_noreplace(pfd, self.name, pfd, back)
            except OSError as e:
                raise Refused("swap-failed", "the destination could not be renamed aside to %s (%s); "
                              "it is unchanged" % (shown(self.backup), e.strerror or e)) from None
            fsync_fd(pfd)
            try:
                rename_noreplace(pfd, part, pfd, self.name)
            except OSError as e:
                why = e.strerror or str(e)
                try:
                    rename_noreplace(pfd, back, pfd, self.name)
                except OSError as e2:
                    raise Refused("swap-failed", "the new copy could not take the destination's name "
                                  "(%s), and the original could not be put back (%s): the original "
                                  "is kept as %s" % (why, e2.strerror or e2, shown(self.backup))) from None
                fsync_fd(pfd)
                raise Refused("swap-failed", "the new copy could not take the destination's name (%s); "
                              "the original was put back under its name" % why) from None
            self.partial = None
            fsync_fd(pfd)
        finally:
            os.close(pfd)

    def commit(self):
        if self.replace is not None:
            return self.swap()
        if self.inside:
            names = os.listdir(self.partial)
            for n in names:
                if os.path.lexists(os.path.join(self.dst, n)):
                    raise Refused("dst-changed", "%s appeared in the destination" % shown(n))
            for n in names:
                os.rename(os.path.join(self.partial, n), os.path.join(self.dst, n))
            os.rmdir(self.partial)
            fsync_dir(self.dst)
        else:
            if self.root_mode is not None:
                os.chmod(self.partial, self.root_mode)
            try:
                # over an absent or empty folder this is one atomic step
                os.rename(self.partial, self.dst)
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise Refused("dst-changed", "the destination changed during the copy") from None
                raise
            fsync_dir(self.parent)
        self.partial = None

    def remove(self):
        if self.partial is not None:
            remove_tree(self.partial)
            self.partial = None


def remove_tree(top):
    """Remove a partial folder even where the source's read-only modes were already applied."""
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            os.chmod(d, 0o700)
            with os.scandir(d) as it:
                stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    shutil.rmtree(top, ignore_errors=True)


def fsync_dir(path):
    """Make a folder's entries durable (a rename, new files)."""
    try:
        fd = os.open(path, RDFLAGS | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_fd(fd):
    try:
        os.fsync(fd)
    except OSError:
        pass


RENAME_NOREPLACE = 1


def rename_noreplace(src_fd, src, dst_fd, dst):
    """Rename that never replaces what is at `dst` (renameat2 RENAME_NOREPLACE through libc).
    Where the kernel, the file system or the libc has no such call, the name is looked up
    first and a plain rename follows: a small window, on those systems only."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError, ImportError):
        fn = None
    if fn is not None:
        if fn(src_fd, src, dst_fd, dst, RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    try:
        os.stat(dst, dir_fd=dst_fd, follow_symlinks=False)
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def fsync_tree(top):
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        fsync_dir(dirpath)


def write_refusal(e):
    """A refusal for an OSError met while writing the destination."""
    where = " (%s)" % shown(os.fsencode(e.filename)) if e.filename else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return Refused("disk-full", "%s%s" % (e.strerror or e, where))
    if e.errno in UNWRITABLE:
        return Refused("dst-unwritable", "%s%s" % (e.strerror or e, where))
    return Refused("write-failed", "%s%s" % (e.strerror or e, where))


def op_write(req, inp, out):
    """Receive frames into a partial folder; report hashes; commit or remove as told."""
    w = Writer(req)
    idle = req.get("idle")
    dog = Watchdog(on_fire=w.remove)
    try:
        stale = w.prepare()
        me = os.getpid()
        say(out, ok(partial=fsdec(w.partial), dst=fsdec(w.dst), stale_removed=stale, pid=me,
                    start=procfs.start_ticks(me)))
        dog.arm(idle)
        threads = max(1, int(req.get("threads") or 4))
        with ThreadPoolExecutor(threads) as pool:
            hashed, found = w.receive(inp, req["files"], req.get("dirs", []), pool, dog, idle)
        dog.arm(idle)
        if json.loads(inp.readline() or b"{}").get("op") != "finish":
            raise EOFError("no finish")
        say(out, ok(files=hashed, found=found))
        dog.arm(req.get("wait"))  # the controller re-checks the source meanwhile
        if json.loads(inp.readline() or b"{}").get("op") != "commit":
            w.remove()
            return {"aborted": True}
        dog.hold()
        w.commit()
        return {"committed": True, "free_bytes": free_bytes(w.dst),
                "kept_as": fsdec(w.backup) if w.backup is not None else None}
    except EOFError:
        w.remove()  # the controller went away: nothing may stay behind
        raise Refused("disconnected", "the controller's stream ended; the partial folder was removed") \
            from None
    except OSError as e:
        w.remove()
        raise write_refusal(e) from None
    finally:
        w.remove()


def op_abandon(req):
    """Stop a reader or writer that no longer answers (identified by pid AND start time, and
    the helper marker) and remove the partial folder that writer was filling: only a folder
    whose name says that writer made it, once that writer is gone."""
    pid, start = req.get("pid"), req.get("start")
    killed = False
    if procfs.same_process(pid, start) and procfs.has_helper_marker(pid):
        try:
            os.kill(pid, signal.SIGKILL)  # a stopped (SIGSTOP) process dies of it too
            killed = True
        except OSError:
            pass
        for _ in range(200):
            if not procfs.same_process(pid, start):
                break
            time.sleep(0.05)
    removed = None
    if req.get("partial") and isinstance(pid, int) and isinstance(start, int):
        path = fsenc(req["partial"])
        rest = os.path.basename(path).partition(PARTIAL)[2]
        if (os.path.isabs(path) and rest.startswith(b"%d-%d-" % (pid, start))
                and not partial_in_use(rest) and kind_of(lstat_or_none(path)) == "dir"):
            remove_tree(path)
            removed = fsdec(path)
    places = {}
    for key in ("dst", "backup"):  # a replace: where the original destination is now
        if req.get(key):
            places[key + "_exists"] = kind_of(lstat_or_none(fsenc(req[key]))) == "dir"
    return dict(places, killed=killed, removed=removed,
                gone=not procfs.same_process(pid, start) if isinstance(pid, int) else True,
                exists=bool(req.get("partial")) and os.path.lexists(fsenc(req["partial"])))


def _hangup(signum, frame):
    raise EOFError("signal %d" % signum)


def main():
    """Read the request line and answer it (streaming ops speak on stdout as they go)."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, _hangup)
    inp = sys.stdin.buffer
    out = sys.stdout.buffer
    ops = {"list": op_list, "abandon": op_abandon, "read": lambda r: op_read(r, inp, out),
           "write": lambda r: op_write(r, inp, out)}
    try:
        line = inp.readline()
        try:
            req = json.loads(line.decode("utf-8", "surrogateescape"))
        except ValueError as e:
            say(out, serve.error_answer("bad-request", "the request is not JSON: %s" % e))
            return
        say(out, serve.dispatch(ops, req))
    except (EOFError, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
