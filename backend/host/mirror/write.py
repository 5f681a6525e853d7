"""The mirror helper's destination end: frames received into a hidden partial folder beside
the destination, fsynced and hashed again from this disk, then renamed into place (or in
the place of a destination it replaces) only when told; a writer that is gone is abandoned
and its partial folder removed. The destination's parent is opened once, from / without
following a link, and every step below it works relative to that descriptor (`Writer`)."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import random
import signal
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fleetdeck.backend.host.lib import files, flags, fsinfo, procfs
from fleetdeck.backend.host.lib import walk as fdwalk
from fleetdeck.backend.host.lib.files import write_all
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, fsenc, shown
from fleetdeck.backend.host.mirror.common import (
    DIRFLAGS,
    HDR,
    PARTIAL,
    SYNC_EVERY,
    UNWRITABLE,
    ChainError,
    Watchdog,
    hash_rel,
    host_path,
    is_partial,
    kind_of,
    ok,
    open_dir_chain,
    same_folder,
    say,
    walk_at,
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


def clean_stale(dir_fd, prefix, where):
    """Remove the partial folders in the open folder `dir_fd` whose writer is gone; their
    paths (`where` is that folder's path, for the answer)."""
    removed = []
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return removed
    for n in names:
        name = os.fsencode(n)
        if not name.startswith(prefix) or partial_in_use(name[len(prefix) :]):
            continue
        if kind_of(stat_at(dir_fd, name)) == "dir":
            remove_tree_at(dir_fd, name)
            removed.append(fsdec(os.path.join(where, name)))
    return removed


def stat_at(dir_fd, name):
    """lstat of `name` in the open folder `dir_fd`; None when nothing is there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_exact(inp, n):
    """Exactly n bytes, or EOFError: the controller went away mid-frame."""
    data = inp.read(n)
    if data is None or len(data) != n:
        raise EOFError("input ended")
    return data


class Writer:
    """The partial folder for one destination, and how to fill, commit or remove it.

    DST's parent is opened once, from / and never through a link (`open_dir_chain`: every
    component O_NOFOLLOW), and all that follows is done relative to that descriptor: the
    partial folder, each folder and file in it (each opened the same way below the partial
    folder's own descriptor), the renames into DST's name. Right before a rename puts anything
    under a final name, and once more after it, the parent's path is walked again: a component
    that became a symlink (`symlink`) or another folder at the path (`dst-changed`) refuses,
    and the partial folder is removed from where it really is. Nothing is written through a
    link, and no folder the path no longer reaches is reported as the destination."""

    def __init__(self, req):
        self.dst = host_path(req["path"])
        self.name = os.path.basename(self.dst)
        if self.name in (b"", b".", b".."):
            raise Refused("bad-path", "the destination must name a folder")
        self.parent = os.path.dirname(self.dst)
        self.partial = None  # its absolute path, for the answers
        self.inside = False
        self.root_mode = req.get("mode")
        #: replacing an existing destination: its pin [dev, ino] as compared, and the name
        #: it is kept under once the new copy takes its place
        self.replace = req.get("replace")
        self.backup = None
        if self.replace is not None:
            self.backup = fsenc(self.replace["backup"])
            if os.path.dirname(self.backup) != self.parent or os.path.basename(self.backup) in (
                b"",
                b".",
                b"..",
                self.name,
            ):
                raise Refused("bad-path", "the name for the replaced destination must be beside it")
        self.pfd = None  # DST's parent, opened once
        self.dfd = None  # DST itself, when it is a mount point the partial folder is made in
        self.home = None  # the folder holding the partial folder: pfd, or dfd
        self.part = None  # the partial folder's name in `home`, while it is there
        self.part_fd = None
        self.lock = threading.Lock()

    def open_parent(self):
        try:
            self.pfd = open_dir_chain(self.parent, create=True)
        except ChainError as e:
            if e.code == "symlink":
                raise Refused(
                    "symlink",
                    "the destination's folder is reached through a symlink: %s; "
                    "mirror writes only through real folders, each opened without "
                    "following a link (give the path the link leads to); nothing was "
                    "changed" % e.detail,
                ) from None
            raise Refused(
                "dst-unwritable",
                e.detail
                if e.code == "unwritable"
                else "cannot create %s: %s" % (shown(self.parent), e.detail),
            ) from None

    def tag(self, prefix):
        me = os.getpid()
        tag = b"%d-%d-%08x" % (me, procfs.start_ticks(me) or 0, random.getrandbits(32))
        return prefix[: 255 - len(tag)] + tag if len(prefix) + len(tag) > 255 else prefix + tag

    def make_partial(self, home, base, where):
        try:
            os.mkdir(base, 0o700, dir_fd=home)
        except OSError as e:
            if e.errno in UNWRITABLE:
                raise Refused(
                    "dst-unwritable", "cannot write in %s: %s" % (shown(where), e.strerror)
                ) from None
            raise
        self.home, self.part, self.partial = home, base, os.path.join(where, base)
        self.part_fd = os.open(base, DIRFLAGS, dir_fd=home)

    def prepare(self):
        self.open_parent()
        st = stat_at(self.pfd, self.name)
        kind = kind_of(st)
        if self.replace is not None:
            return self.prepare_replace(st, kind)
        if kind == "symlink":
            raise Refused("dst-symlink", "the destination is a symlink")
        if kind not in (None, "dir"):
            raise Refused("dst-not-a-directory", "the destination exists and is not a folder")
        prefix = b"." + self.name + PARTIAL
        stale = clean_stale(self.pfd, prefix, self.parent)
        if kind == "dir":
            try:
                dfd = os.open(self.name, DIRFLAGS, dir_fd=self.pfd)
            except OSError:
                dfd = None
            if dfd is None or not same_ids(os.fstat(dfd), st):
                if dfd is not None:
                    os.close(dfd)
                raise Refused(
                    "dst-changed",
                    "the destination changed while it was opened; nothing was changed",
                )
            self.dfd = dfd
            stale += clean_stale(dfd, PARTIAL, self.dst)
            if [n for n in os.listdir(dfd) if not is_partial(os.fsencode(n))]:
                raise Refused("dst-not-empty", "the destination is no longer empty")
            # a mount point cannot be renamed over: fill a partial folder inside it instead
            self.inside = st.st_dev != os.fstat(self.pfd).st_dev
        if self.inside:
            self.make_partial(self.dfd, self.tag(PARTIAL), self.dst)
        else:
            self.make_partial(self.pfd, self.tag(prefix), self.parent)
        return stale

    def prepare_replace(self, st, kind):
        """A partial folder beside a destination that exists and will be replaced; the
        destination must still be the folder that was compared (its pin)."""
        if kind != "dir" or [st.st_dev, st.st_ino] != list(self.replace["pin"]):
            raise Refused(
                "dst-changed",
                "the destination is no longer the folder that was compared; nothing was changed",
            )
        if st.st_dev != os.fstat(self.pfd).st_dev:
            raise Refused(
                "dst-mounted",
                "the destination is a mount point, which cannot be renamed "
                "aside; replace what is inside it by hand",
            )
        if stat_at(self.pfd, os.path.basename(self.backup)) is not None:
            raise Refused(
                "dst-changed", "%s already exists; nothing was changed" % shown(self.backup)
            )
        prefix = b"." + self.name + PARTIAL
        stale = clean_stale(self.pfd, prefix, self.parent)
        self.make_partial(self.pfd, self.tag(prefix), self.parent)
        return stale

    def below(self, rel_dir):
        """The folder `rel_dir` (bytes, '' for the top) of the partial folder, opened by
        descriptor from it without following a link; the caller closes it."""
        parts = [p for p in rel_dir.split(b"/") if p]
        return fdwalk.descend(
            os.open(".", DIRFLAGS, dir_fd=self.part_fd), parts, keep_parent=False
        )[1]

    def at(self, rel, fn):
        """fn(dir_fd, name) for the entry `rel` of the partial folder, its folder opened by
        descriptor (`below`)."""
        head, _, name = fsenc(rel).rpartition(b"/")
        fd = self.below(head)
        try:
            return fn(fd, name)
        finally:
            os.close(fd)

    def receive(self, inp, files, dirs, pool, dog, idle):
        for rel, _mode in sorted(dirs, key=lambda d: d[0].count("/")):
            self.at(rel, lambda fd, name: os.mkdir(name, 0o700, dir_fd=fd))
        futures = []
        for f in files:
            fd = self.at(
                f["path"], lambda d, name: os.open(name, flags.CREATE_NEW, 0o600, dir_fd=d)
            )
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
                os.utime(fd, ns=(f["mtime_ns"], f["mtime_ns"]))
            finally:
                os.close(fd)
            # hashed again from this disk while the next file arrives
            futures.append(pool.submit(hash_rel, None, f["path"], False, self.part_fd))
        dog.disarm()  # hashing the last files: the controller bounds this wait itself
        hashed = [fut.result() for fut in futures]
        # the source's modes only now: a read-only file or folder must not stop the hashing
        # (the deepest folders first: a folder made unsearchable keeps no one below it waiting)
        for f in files:
            self.at(f["path"], lambda fd, name, m=f["mode"]: os.chmod(name, m, dir_fd=fd))
        for rel, mode in sorted(dirs, key=lambda d: -d[0].count("/")):
            self.at(rel, lambda fd, name, m=mode: os.chmod(name, m, dir_fd=fd))
        # what is really in the partial folder now, folders and strays included, each folder
        # fsynced after the ones below it
        found = walk_at(self.part_fd, each_dir=fsync_fd)
        return hashed, {"files": found["files"], "dirs": found["dirs"], "other": found["other"]}

    def place_changed(self):
        """(code, sentence) when DST's parent, walked again from /, is no longer the folder
        opened at the start (or DST, where the partial folder is inside it, is no longer the
        folder it was made in); None while all is as opened."""
        bad = same_folder(self.pfd, self.parent)
        if bad is None and self.inside:
            st = stat_at(self.pfd, self.name)
            if st is None or not same_ids(st, os.fstat(self.dfd)):
                bad = (
                    "dst-changed",
                    "%s is no longer the folder the copy was written in" % shown(self.dst),
                )
        return bad

    def check_place(self):
        """Refuse (`symlink`, `dst-changed`) before anything takes a final name, unless the
        destination's folder is still the one opened at the start."""
        bad = self.place_changed()
        if bad is not None:
            raise Refused(
                bad[0],
                "the destination's folder changed during the copy (%s); nothing "
                "was written through it and nothing was put in place" % bad[1],
            )

    def swap(self):
        """Put the verified partial folder in the destination's place, the destination kept
        under `backup`: first the destination is renamed aside, then the partial folder takes
        its name, each rename refusing to replace anything (renameat2 RENAME_NOREPLACE), the
        folder fsynced after each. A failure of the second rename puts the destination back;
        whatever happens, the original is under its own name or under `backup`, never gone.
        (RENAME_EXCHANGE would leave no instant without a destination, but a writer killed
        right after it would leave the original under the partial folder's name, which the
        next writer removes as stale: losing it is worse than a moment without the name.)"""
        pfd = self.pfd
        part = self.part
        back = os.path.basename(self.backup)
        st = stat_at(pfd, self.name)
        if (
            st is None
            or not stat.S_ISDIR(st.st_mode)
            or [st.st_dev, st.st_ino] != list(self.replace["pin"])
        ):
            raise Refused(
                "dst-changed", "the destination changed during the copy; it was not replaced"
            )
        self.check_place()
        if self.root_mode is not None:
            os.fchmod(self.part_fd, self.root_mode)
        try:
            rename_noreplace(pfd, self.name, pfd, back)
        except OSError as e:
            raise Refused(
                "swap-failed",
                "the destination could not be renamed aside to %s (%s); "
                "it is unchanged" % (shown(self.backup), e.strerror or e),
            ) from None
        fsync_fd(pfd)
        try:
            rename_noreplace(pfd, part, pfd, self.name)
        except OSError as e:
            why = e.strerror or str(e)
            try:
                rename_noreplace(pfd, back, pfd, self.name)
            except OSError as e2:
                raise Refused(
                    "swap-failed",
                    "the new copy could not take the destination's name "
                    "(%s), and the original could not be put back (%s): the original "
                    "is kept as %s" % (why, e2.strerror or e2, shown(self.backup)),
                ) from None
            fsync_fd(pfd)
            raise Refused(
                "swap-failed",
                "the new copy could not take the destination's name (%s); "
                "the original was put back under its name" % why,
            ) from None
        self.part = self.partial = None
        fsync_fd(pfd)
        bad = self.place_changed()
        if bad is not None:
            raise Refused(
                bad[0],
                "the destination's folder changed while the copy took its place "
                "(%s): the copy and the original (as %s) are in the folder that was "
                "opened, which the path no longer reaches" % (bad[1], shown(back)),
            )

    def commit(self):
        if self.replace is not None:
            return self.swap()
        self.check_place()
        if self.inside:
            names = [os.fsencode(n) for n in os.listdir(self.part_fd)]
            for n in names:
                if stat_at(self.dfd, n) is not None:
                    raise Refused("dst-changed", "%s appeared in the destination" % shown(n))
            for n in names:
                os.rename(n, n, src_dir_fd=self.part_fd, dst_dir_fd=self.dfd)
            os.rmdir(self.part, dir_fd=self.dfd)
            self.part = self.partial = None
            fsync_fd(self.dfd)
            bad = self.place_changed()
            if bad is not None:
                raise Refused(
                    bad[0],
                    "the destination's folder changed while the copy was put in "
                    "place (%s): the copy is in the folder that was opened, which the "
                    "path no longer reaches" % bad[1],
                )
            return None
        if self.root_mode is not None:
            os.fchmod(self.part_fd, self.root_mode)
        try:
            # over an absent or empty folder this is one atomic step
            os.rename(self.part, self.name, src_dir_fd=self.pfd, dst_dir_fd=self.pfd)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise Refused("dst-changed", "the destination changed during the copy") from None
            raise
        moved, self.part = self.part, None
        fsync_fd(self.pfd)
        bad = self.place_changed()
        if bad is not None:
            # the copy went into the folder opened at the start, which the path no longer
            # reaches: it is taken back out of the final name, then removed
            st = stat_at(self.pfd, self.name)
            if st is not None and same_ids(st, os.fstat(self.part_fd)):
                try:
                    rename_noreplace(self.pfd, self.name, self.pfd, moved)
                    self.part = moved
                except OSError:
                    pass
            raise Refused(
                bad[0],
                "the destination's folder changed while the copy was put in place "
                "(%s); the copy was taken back out of the destination's name" % bad[1],
            )
        self.partial = None
        return None

    def free_bytes(self):
        try:
            return fsinfo.free_bytes(self.pfd)
        except OSError:
            return None

    def remove(self):
        """Remove the partial folder from the folder it was made in (by descriptor); True
        when none is left."""
        with self.lock:
            if self.part is None:
                return True
            if self.part_fd is not None:
                os.close(self.part_fd)
                self.part_fd = None
            gone = remove_tree_at(self.home, self.part)
            self.part = None
            return gone


def same_ids(a, b):
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def remove_tree_at(dir_fd, name):
    """Remove the folder `name` of the open folder `dir_fd` and all it holds, by descriptor,
    never following a link, even where the source's read-only modes were already applied;
    True when nothing is left at `name`."""
    try:
        fd = os.open(name, DIRFLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                os.unlink(name, dir_fd=dir_fd)  # a link or a file at its name: only the entry goes
            except OSError:
                pass
        return stat_at(dir_fd, name) is None
    try:
        _empty_at(fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        pass
    return stat_at(dir_fd, name) is None


def _empty_at(fd):
    try:
        os.fchmod(fd, 0o700)
    except OSError:
        pass
    try:
        names = [os.fsencode(n) for n in os.listdir(fd)]
    except OSError:
        return
    for name in names:
        st = stat_at(fd, name)
        if st is None:
            continue
        try:
            if stat.S_ISDIR(st.st_mode):
                remove_tree_at(fd, name)
            else:
                os.unlink(name, dir_fd=fd)
        except OSError:
            continue


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


def write_refusal(e):
    """A refusal for an OSError met while writing the destination."""
    where = " (%s)" % shown(os.fsencode(e.filename)) if e.filename else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return Refused("disk-full", "%s%s" % (e.strerror or e, where))
    if e.errno in UNWRITABLE:
        return Refused("dst-unwritable", "%s%s" % (e.strerror or e, where))
    return Refused("write-failed", "%s%s" % (e.strerror or e, where))


def op_write(req, inp, out):
    """Receive frames into a partial folder; report hashes; commit or remove as told. A
    refusal says whether the partial folder was removed (`partial_removed`): once the parent's
    path leads elsewhere, only this writer, holding the folder's descriptor, can tell."""
    w = Writer(req)
    idle = req.get("idle")
    dog = Watchdog(on_fire=w.remove)
    try:
        stale = w.prepare()
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
        if json.loads(inp.readline() or b"{}").get("op") != "finish":
            raise EOFError("no finish")
        say(out, ok(files=hashed, found=found))
        dog.arm(req.get("wait"))  # the controller re-checks the source meanwhile
        if json.loads(inp.readline() or b"{}").get("op") != "commit":
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


def kind_by_chain(path):
    """(kind of what is at the absolute path `path`, its folder walked from / without following
    a link) or (None, sentence) when that folder cannot be walked so."""
    head, name = os.path.split(path)
    try:
        fd = open_dir_chain(head)
    except ChainError as e:
        return None, e.detail
    try:
        return kind_of(stat_at(fd, name)), None
    finally:
        os.close(fd)


def op_abandon(req):
    """Stop a reader or writer that no longer answers (identified by pid AND start time, and
    the helper marker) and remove the partial folder that writer was filling: only a folder
    whose name says that writer made it, once that writer is gone, reached from / without
    following a link (`blocked` says why not, when a link or a missing folder is on the way:
    `exists` is then null, not known)."""
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
    removed, exists, blocked = None, False, None
    path = fsenc(req["partial"]) if req.get("partial") else None
    if path is not None and os.path.isabs(path):
        head, base = os.path.split(path)
        try:
            hfd = open_dir_chain(head)
        except ChainError as e:
            exists, blocked = None, e.detail
        else:
            try:
                rest = base.partition(PARTIAL)[2]
                if (
                    isinstance(pid, int)
                    and isinstance(start, int)
                    and rest.startswith(b"%d-%d-" % (pid, start))
                    and not partial_in_use(rest)
                    and kind_of(stat_at(hfd, base)) == "dir"
                ):
                    remove_tree_at(hfd, base)
                    removed = fsdec(path)
                exists = stat_at(hfd, base) is not None
            finally:
                os.close(hfd)
    places = {}
    for key in ("dst", "backup"):  # a replace: where the original destination is now
        if req.get(key):
            kind, why = kind_by_chain(fsenc(req[key]))
            places[key + "_exists"] = None if why else kind == "dir"
            blocked = blocked or why
    return dict(
        places,
        killed=killed,
        removed=removed,
        blocked=blocked,
        gone=not procfs.same_process(pid, start) if isinstance(pid, int) else True,
        exists=exists,
    )
