"""The partial folder of one destination of a copy (`Writer`): made hidden beside the
destination (or inside it, where it is a mount point), filled with the frames received, every
file fsynced and hashed again from this disk, then renamed into place only when told, or
removed. Replacing a destination that exists is its part in `replace`."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import random
import threading

from fleetdeck.backend.host.lib import flags, fsinfo, procfs
from fleetdeck.backend.host.lib import walk as fdwalk
from fleetdeck.backend.host.lib.files import write_all
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsenc, shown
from fleetdeck.backend.host.mirror.abandon import clean_stale
from fleetdeck.backend.host.mirror.common import (
    DIRFLAGS,
    HDR,
    PARTIAL,
    SYNC_EVERY,
    UNWRITABLE,
    ChainError,
    hash_rel,
    host_path,
    is_partial,
    kind_of,
    open_dir_chain,
    same_folder,
    walk_at,
)
from fleetdeck.backend.host.mirror.fdops import (
    fsync_fd,
    remove_tree_at,
    rename_noreplace,
    same_ids,
    stat_at,
)
from fleetdeck.backend.host.mirror.replace import Replacing

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from concurrent.futures import ThreadPoolExecutor
    from typing import (
        Any,
        BinaryIO,
        Callable,
        Dict,
        List,
        Optional,
        Sequence,
        Tuple,
        TypeVar,
        Union,
    )

    from fleetdeck.backend.host.mirror.common import Hashed, Watchdog

    T = TypeVar("T")


def read_exact(inp: BinaryIO, n: int) -> bytes:
    """Exactly n bytes, or EOFError: the controller went away mid-frame."""
    data = inp.read(n)
    if data is None or len(data) != n:
        raise EOFError("input ended")
    return data


class Writer(Replacing):
    """The partial folder for one destination, and how to fill, commit or remove it.

    DST's parent is opened once, from / and never through a link (`open_dir_chain`: every
    component O_NOFOLLOW), and all that follows is done relative to that descriptor: the
    partial folder, each folder and file in it (each opened the same way below the partial
    folder's own descriptor), the renames into DST's name. Right before a rename puts anything
    under a final name, and once more after it, the parent's path is walked again: a component
    that became a symlink (`symlink`) or another folder at the path (`dst-changed`) refuses,
    and the partial folder is removed from where it really is. Nothing is written through a
    link, and no folder the path no longer reaches is reported as the destination."""

    def __init__(self, req: Dict[str, Any]) -> None:
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
        self.dfd: Any = None  # DST itself, when it is a mount point the partial folder is made in
        self.home: Optional[int] = None  # the folder holding the partial folder: pfd, or dfd
        self.part = None  # the partial folder's name in `home`, while it is there
        self.part_fd = None
        self.lock = threading.Lock()

    def open_parent(self) -> None:
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

    def tag(self, prefix: bytes) -> bytes:
        me = os.getpid()
        tag = b"%d-%d-%08x" % (me, procfs.start_ticks(me) or 0, random.getrandbits(32))
        return prefix[: 255 - len(tag)] + tag if len(prefix) + len(tag) > 255 else prefix + tag

    def make_partial(self, home: int, base: bytes, where: bytes) -> None:
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

    def prepare(self) -> List[str]:
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
            if dfd is None or st is None or not same_ids(os.fstat(dfd), st):
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

    def below(self, rel_dir: bytes) -> int:
        """The folder `rel_dir` (bytes, '' for the top) of the partial folder, opened by
        descriptor from it without following a link; the caller closes it."""
        parts = [p for p in rel_dir.split(b"/") if p]
        return fdwalk.descend(
            os.open(".", DIRFLAGS, dir_fd=self.part_fd), parts, keep_parent=False
        )[1]

    def at(self, rel: Union[str, bytes], fn: Callable[..., T]) -> T:
        """fn(dir_fd, name) for the entry `rel` of the partial folder, its folder opened by
        descriptor (`below`)."""
        head, _, name = fsenc(rel).rpartition(b"/")
        fd = self.below(head)
        try:
            return fn(fd, name)
        finally:
            os.close(fd)

    def receive(
        self,
        inp: BinaryIO,
        files: Sequence[Dict[str, Any]],
        dirs: Sequence[Sequence[Any]],
        pool: ThreadPoolExecutor,
        dog: Watchdog,
        idle: Optional[float],
    ) -> Tuple[List[Hashed], Dict[str, Any]]:
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

    def place_changed(self) -> Optional[Tuple[str, str]]:
        """(code, sentence) when DST's parent, walked again from /, is no longer the folder
        opened at the start (or DST, where the partial folder is inside it, is no longer the
        folder it was made in); None while all is as opened."""
        bad = same_folder(self.pfd, self.parent)
        if bad is None and self.inside and self.dfd is not None:
            st = stat_at(self.pfd, self.name)
            if st is None or not same_ids(st, os.fstat(self.dfd)):
                bad = (
                    "dst-changed",
                    "%s is no longer the folder the copy was written in" % shown(self.dst),
                )
        return bad

    def check_place(self) -> None:
        """Refuse (`symlink`, `dst-changed`) before anything takes a final name, unless the
        destination's folder is still the one opened at the start."""
        bad = self.place_changed()
        if bad is not None:
            raise Refused(
                bad[0],
                "the destination's folder changed during the copy (%s); nothing "
                "was written through it and nothing was put in place" % bad[1],
            )

    def commit(self) -> None:
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

    def free_bytes(self) -> Optional[int]:
        try:
            return fsinfo.free_bytes(self.pfd)
        except OSError:
            return None

    def remove(self) -> bool:
        """Remove the partial folder from the folder it was made in (by descriptor); True
        when none is left."""
        with self.lock:
            if self.part is None or self.home is None:
                return True
            if self.part_fd is not None:
                os.close(self.part_fd)
                self.part_fd = None
            gone = remove_tree_at(self.home, self.part)
            self.part = None
            return gone
