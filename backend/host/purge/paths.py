"""Purge's paths: an absolute path split into components and walked by fd (the host
library's one walker, `walk`), each folder pinned by (dev, ino), with purge's refusal codes and
sentences; a folder's contents scanned without following a link; a file hashed the same way."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import stat

from fleetdeck.backend.host.lib import flags, walk
from fleetdeck.backend.host.lib.hashing import sha256_at
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.walk import close_fds

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Callable, List, Optional, Sequence, Tuple

DIR_FLAGS = flags.DIR
WALK_CODES = (
    "not-absolute",
    "not-normalized",
    "not-found",
    "symlink",
    "not-directory",
    "unreadable",
)
__all__ = [
    "DIR_FLAGS",
    "WALK_CODES",
    "WalkError",
    "close_fds",
    "open_chain",
    "scan",
    "sha256_file",
    "split_path",
]


class WalkError(Exception):
    """A path that cannot be walked (or removed) safely: `code` is a refusal code."""

    def __init__(self, code: str, detail: str) -> None:
        Exception.__init__(self, detail)
        self.code = code
        self.detail = detail


def split_path(given: str) -> Tuple[str, List[str]]:
    """(absolute path, components): `~` expands here, '.'/'..' and relative paths refuse."""
    p = os.path.expanduser(given) if given.startswith("~") else given
    if not p.startswith("/"):
        raise WalkError("not-absolute", "it is not an absolute path")
    comps = [c for c in p.split("/") if c]
    if any(c in (".", "..") for c in comps):
        raise WalkError("not-normalized", "it has '.' or '..' components")
    return "/" + "/".join(comps), comps


def _why(parent_fd: int, name: str, last: bool, err: OSError) -> Tuple[str, str]:
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return "not-found", "%s does not exist" % shown(name)
        return "unreadable", "%s cannot be read: %s" % (shown(name), e.strerror)
    if stat.S_ISLNK(st.st_mode):
        return "symlink", "component %s is a symlink" % shown(name)
    if not stat.S_ISDIR(st.st_mode):
        if last:
            return "not-directory", "it is not a directory"
        return "not-found", "component %s is not a directory" % shown(name)
    return "unreadable", "%s cannot be opened: %s" % (shown(name), err.strerror)


def open_chain(
    comps: List[str], pins: Optional[Sequence[Sequence[int]]] = None
) -> Tuple[Optional[int], int, List[List[int]]]:
    """Open / then each component with O_NOFOLLOW; (parent_fd, fd, pins). `pins` given: any
    component whose (dev, ino) differs raises WalkError('changed-since-check')."""
    fd = os.open("/", DIR_FLAGS)
    try:
        st = os.fstat(fd)
        got = [[st.st_dev, st.st_ino]]
        if pins is not None and (not pins or list(pins[0]) != got[0]):
            raise WalkError("changed-since-check", "/ is not the folder checked")
    except BaseException:
        os.close(fd)
        raise

    def refuse(parent_fd: int, i: int, name: str, err: OSError) -> None:
        code, detail = _why(parent_fd, name, i == len(comps) - 1, err)
        raise WalkError(code, detail) from None

    def pinned(i: int, name: str, nfd: int) -> None:
        st = os.fstat(nfd)
        got.append([st.st_dev, st.st_ino])
        if pins is not None and (len(pins) < len(got) or list(pins[len(got) - 1]) != got[-1]):
            raise WalkError(
                "changed-since-check", "component %s is not the folder checked" % shown(name)
            )

    parent, fd = walk.descend(fd, comps, on_error=refuse, on_step=pinned)
    return parent, fd, got


#: folders below the scanned one that a scan goes into; deeper is refused (ELOOP), not walked
SCAN_DEPTH = 256


def _names(fd: int) -> List[str]:
    with os.scandir(fd) as it:
        return [e.name for e in it]


def scan(fd: int, path: str, visit: Callable[[str, str, os.stat_result], object]) -> None:
    """Call visit(path, name, lstat) for every entry under the open directory, depth first,
    never following a link; a sub-folder swapped between lstat and open raises OSError, and so
    does one nested deeper than SCAN_DEPTH (a loop of its own, not recursion: a hostile tree
    thousands deep is a refusal with its reason, not a RecursionError)."""
    stack = [(fd, path, iter(_names(fd)))]  # (open folder, its path, the names left in it)
    try:
        while stack:
            dfd, dpath, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if dfd != fd:
                    os.close(dfd)
                continue
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            child = dpath + "/" + name
            visit(child, name, st)
            if not stat.S_ISDIR(st.st_mode):
                continue
            if len(stack) > SCAN_DEPTH:
                raise OSError(
                    errno.ELOOP,
                    "%s is nested more than %d folders deep" % (shown(child), SCAN_DEPTH),
                )
            sub = os.open(name, DIR_FLAGS, dir_fd=dfd)
            try:
                sst = os.fstat(sub)
                if (sst.st_dev, sst.st_ino) != (st.st_dev, st.st_ino):
                    raise OSError(errno.ESTALE, "%s changed while scanned" % shown(child))
                stack.append((sub, child, iter(_names(sub))))
            except BaseException:
                os.close(sub)
                raise
    finally:
        for dfd, _path, _names_left in stack:
            if dfd != fd:
                os.close(dfd)


def sha256_file(path: str) -> str:
    """sha256 of the file at an absolute path walked with O_NOFOLLOW."""
    comps = [c for c in path.split("/") if c]
    parent, fd, _ = open_chain(comps[:-1])
    try:
        return sha256_at(fd, comps[-1])
    finally:
        close_fds(parent, fd)
