"""What the mirror helper's ends share: the frame and partial-folder constants, answers,
the no-progress watchdog, host paths, a folder listed (`walk`, or by descriptor `walk_at`), a
file opened and hashed without following a link (`open_rel`, `open_at`, `hash_rel`), and a
folder opened from / without following any link on the way (`open_dir_chain`), all through
the host library's one walker."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import re
import stat
import struct
import sys
import threading
import time
from typing import Dict

from fleetdeck.backend.host.lib import flags, fsinfo, hashing, serve
from fleetdeck.backend.host.lib import walk as fdwalk
from fleetdeck.backend.host.lib.text import fsdec, fsenc, shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, BinaryIO, Callable, List, Optional, Set, Tuple, TypedDict, Union

    class Hashed(TypedDict, total=False):
        """A file hashed again (`hash_rel`): its sha256 and bytes, or why it could not be."""

        sha256: Optional[str]
        bytes: int
        error: str


CHUNK = 1 << 20
# Bytes written between two fdatasync calls: the final fsync of a file then flushes at most
# this much, so a disk doing 2 MB/s still answers within a 30 s command_timeout.
SYNC_EVERY = 64 << 20
HDR = struct.Struct(">I")
PARTIAL = b".fleetdeck-partial-"
# what follows PARTIAL in a name a writer made: PID-START-RANDOM (PID-RANDOM from older ones)
PARTIAL_TAG = re.compile(rb"^[0-9]+-(?:[0-9]+-)?[0-9a-f]{8}$")
RDFLAGS = flags.READ
DIRFLAGS = flags.DIR
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def is_partial(name: bytes) -> bool:
    """True for the name of a partial folder a writer made inside a destination."""
    return name.startswith(PARTIAL) and PARTIAL_TAG.match(name[len(PARTIAL) :]) is not None


def say(out: BinaryIO, obj: object) -> None:
    """Write one answer line (the host library's JSON; undecodable names kept)."""
    out.write(serve.dumps(obj).encode("utf-8", "surrogateescape") + b"\n")
    out.flush()


def ok(**fields: Any) -> Dict[str, Any]:
    fields["ok"] = True
    return fields


class Watchdog:
    """The helper's own no-progress timeout: a thread that ends the process when the
    controller has neither sent nor taken anything for `limit` seconds (the controller was
    stopped, or its connection hangs without closing), after running `on_fire` (the writer
    removes its partial folder). Armed and disarmed by the main thread; `hold()` keeps it
    from firing during a commit."""

    def __init__(self, on_fire: Optional[Callable[[], object]] = None) -> None:
        self.deadline: Optional[float] = None
        self.lock = threading.Lock()
        self.held = False
        self.on_fire = on_fire
        t = threading.Thread(target=self._watch, daemon=True)
        t.start()

    def arm(self, limit: Optional[float]) -> None:
        self.deadline = None if not limit else time.monotonic() + float(limit)

    def disarm(self) -> None:
        self.deadline = None

    def hold(self) -> None:
        with self.lock:
            self.held = True

    def _watch(self) -> None:
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


def host_path(p: Union[str, bytes]) -> bytes:
    """`~` expands on this host; a relative path is relative to where the session starts."""
    b = os.path.expanduser(fsenc(p))
    if not b.startswith(b"/"):
        b = os.path.join(os.getcwdb(), b)
    while len(b) > 1 and b.endswith(b"/"):
        b = b[:-1]
    return b


def kind_of(st: Optional[os.stat_result]) -> Optional[str]:
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


def lstat_or_none(path: bytes) -> Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def open_rel(root: bytes, rel: bytes, follow: bool) -> int:
    """Open root/rel for reading; without `follow`, a symlink at any component (root
    included) is refused with ELOOP."""
    if follow:
        return os.open(os.path.join(root, rel), RDFLAGS)
    parts = rel.split(b"/")
    _, fd = fdwalk.open_below(root, parts[:-1], keep_parent=False)
    try:
        return os.open(parts[-1], flags.READ_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def open_at(dir_fd: int, rel: bytes) -> int:
    """Open `rel` (bytes, may hold '/') below the open folder `dir_fd` for reading, no link
    followed at any component (ELOOP or ENOTDIR otherwise)."""
    parts = rel.split(b"/")
    _, fd = fdwalk.descend(os.open(".", DIRFLAGS, dir_fd=dir_fd), parts[:-1], keep_parent=False)
    try:
        return os.open(parts[-1], flags.READ_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


class ChainError(Exception):
    """A folder's path that cannot be walked from / without following a link. `code`:
    `symlink`, `not-found`, `not-a-directory`, `unwritable` or `unreadable`; `detail` a
    sentence naming the component that stopped the walk."""

    def __init__(self, code: str, detail: str) -> None:
        Exception.__init__(self, detail)
        self.code = code
        self.detail = detail


def open_dir_chain(path: bytes, create: bool = False) -> int:
    """The folder at the absolute path `path` (bytes), opened from / one component at a time
    with O_DIRECTORY|O_NOFOLLOW (the host library's walker), so no symlink anywhere on the way
    is followed and none can be swapped in between a check and a use: every later step works
    relative to the descriptor returned. With `create`, a missing component is made (mode
    0o777 less the umask) as the walk reaches it. ChainError names what stopped it."""
    comps = [c for c in path.split(b"/") if c]
    failed: Dict[int, OSError] = {}

    def make(fd: int, i: int) -> None:
        if create and i < len(comps):
            try:
                os.mkdir(comps[i], 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as e:
                failed[i] = e

    def refuse(fd: int, i: int, name: bytes, err: OSError) -> None:
        where = shown(b"/" + b"/".join(comps[: i + 1]))
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as e:
            if i in failed:
                raise ChainError(
                    "unwritable", "cannot create %s: %s" % (where, failed[i].strerror)
                ) from None
            if e.errno == errno.ENOENT:
                raise ChainError("not-found", "%s does not exist" % where) from None
            raise ChainError("unreadable", "%s cannot be read: %s" % (where, e.strerror)) from None
        if stat.S_ISLNK(st.st_mode):
            try:
                target = " (to %s)" % shown(os.readlink(name, dir_fd=fd))
            except OSError:
                target = ""
            raise ChainError("symlink", "%s is a symlink%s" % (where, target)) from None
        if not stat.S_ISDIR(st.st_mode):
            raise ChainError("not-a-directory", "%s is not a folder" % where) from None
        raise ChainError("unreadable", "%s cannot be opened: %s" % (where, err.strerror)) from None

    root = os.open(b"/", DIRFLAGS)
    try:
        make(root, 0)
    except BaseException:
        os.close(root)
        raise
    _, fd = fdwalk.descend(
        root, comps, on_error=refuse, on_step=lambda i, _n, nfd: make(nfd, i + 1), keep_parent=False
    )
    return fd


def same_folder(fd: int, path: bytes) -> Optional[Tuple[str, str]]:
    """None when `path`, walked again from / without following a link, is still the folder open
    as `fd`; otherwise (code, sentence): `symlink` when a component of it is now a link,
    `dst-changed` when it is another folder or gone."""
    try:
        now = open_dir_chain(path)
    except ChainError as e:
        return ("symlink" if e.code == "symlink" else "dst-changed"), e.detail
    try:
        a, b = os.fstat(fd), os.fstat(now)
    finally:
        os.close(now)
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        return "dst-changed", "%s is now another folder" % shown(path)
    return None


def file_facts(st: os.stat_result) -> List[int]:
    """What says a file is unchanged: size, mtime, ctime (no user can set it), inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def walk(root: bytes, follow: bool, skip_partials: bool) -> Dict[str, Any]:
    """Everything under root, as relative paths, sorted by kind. With `follow`, symlinks are
    followed and each one whose target lies outside root is named in `outside`."""
    out: Dict[str, List[Any]] = {
        "files": [],
        "dirs": [],
        "symlinks": [],
        "special": [],
        "errors": [],
        "partials": [],
        "outside": [],
    }
    seen: Set[Tuple[int, int]] = set()
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
            if (
                skip_partials
                and not rel
                and is_partial(ent.name)
                and ent.is_dir(follow_symlinks=False)
            ):
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
                out["files"].append(
                    {
                        "path": fsdec(r),
                        "bytes": st.st_size,
                        "mtime_ns": st.st_mtime_ns,
                        "ctime_ns": st.st_ctime_ns,
                        "ino": st.st_ino,
                        "mode": stat.S_IMODE(st.st_mode),
                    }
                )
            else:
                out["special"].append(fsdec(r))
    out["files"].sort(key=lambda f: f["path"])
    out["dirs"].sort()
    return out


def walk_at(fd: int, each_dir: Optional[Callable[[int], object]] = None) -> Dict[str, List[Any]]:
    """What the open folder `fd` holds, by descriptor and never following a link: relative
    paths of its files, folders and anything else (links, special files), and the folders
    that could not be read. `each_dir(dir_fd)` is called for every folder, the top one
    included, after what it holds (a folder's entries fsynced after its sub-folders')."""
    out: Dict[str, List[Any]] = {"files": [], "dirs": [], "other": [], "errors": []}

    def visit(dfd: int, rel: bytes) -> None:
        try:
            with os.scandir(dfd) as it:
                entries = [(os.fsencode(e.name), e) for e in it]
        except OSError as e:
            out["errors"].append([fsdec(rel), e.strerror or str(e)])
            entries = []
        for name, ent in entries:
            r = rel + b"/" + name if rel else name
            try:
                st = ent.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    out["dirs"].append(fsdec(r))
                    sub = os.open(name, DIRFLAGS, dir_fd=dfd)
                    try:
                        visit(sub, r)
                    finally:
                        os.close(sub)
                elif stat.S_ISREG(st.st_mode):
                    out["files"].append(fsdec(r))
                else:
                    out["other"].append(fsdec(r))
            except OSError as e:
                out["errors"].append([fsdec(r), e.strerror or str(e)])
        if each_dir is not None:
            each_dir(dfd)

    visit(fd, b"")
    out["files"].sort()
    out["dirs"].sort()
    return out


def hash_rel(
    root: Optional[bytes], rel: Union[str, bytes], follow: bool, dir_fd: Optional[int] = None
) -> Hashed:
    """sha256 of root/rel read from this disk (rel below the open folder `dir_fd` instead,
    when given), or an error sentence."""
    try:
        if dir_fd is not None:
            fd = open_at(dir_fd, fsenc(rel))
        else:
            assert root is not None  # the folder `rel` is below: a root, or `dir_fd`
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


def free_bytes(path: bytes) -> Optional[int]:
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
