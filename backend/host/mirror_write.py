"""The mirror helper's destination end: frames received into a hidden partial folder beside
the destination, fsynced and hashed again from this disk, then renamed into place (or in
the place of a destination it replaces) only when told; a writer that is gone is abandoned
and its partial folder removed."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import stat
import time
from concurrent.futures import ThreadPoolExecutor

from fleetdeck.backend.host.lib import files, flags, procfs
from fleetdeck.backend.host.lib.files import write_all
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, fsenc, shown
from fleetdeck.backend.host.mirror_common import (
    DIRFLAGS,
    HDR,
    PARTIAL,
    RDFLAGS,
    SYNC_EVERY,
    UNWRITABLE,
    Watchdog,
    free_bytes,
    hash_rel,
    host_path,
    is_partial,
    kind_of,
    lstat_or_none,
    ok,
    say,
    walk,
)


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
            fd = os.open(path, flags.CREATE_NEW, 0o600)
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


RENAME_NOREPLACE = files.RENAME_NOREPLACE


def rename_noreplace(src_fd, src, dst_fd, dst):
    """Rename that never replaces what is at `dst` (renameat2 RENAME_NOREPLACE through libc).
    Where the kernel, the file system or the libc has no such call, the name is looked up
    first and a plain rename follows: a small window, on those systems only."""
    if files.renameat2(src_fd, src, dst_fd, dst, RENAME_NOREPLACE):
        return
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
