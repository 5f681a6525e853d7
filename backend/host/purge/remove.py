"""Purge's removal: a checked folder removed only while it is the object that was checked,
renamed to a private name first, emptied by fd, never following a link."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import stat

from fleetdeck.backend.host.lib import files, fsinfo
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.paths import DIR_FLAGS, WalkError, close_fds, open_chain

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import AbstractSet, List, Optional, Sequence, Tuple

PRIVATE_PREFIX = ".fleetdeck-purge-"
RENAME_NOREPLACE = files.RENAME_NOREPLACE


class _Moved(Exception):
    """The entry being removed is not (or no longer holds only) what was checked."""


def put_back(pfd: int, private: str, name: str) -> str:
    """Rename `private` back to `name` without ever replacing something now at `name`; a
    sentence saying where the entry is when it cannot go back."""
    try:
        done = files.renameat2(pfd, private, pfd, name, RENAME_NOREPLACE)
        if done is None:
            try:
                os.stat(name, dir_fd=pfd, follow_symlinks=False)
                raise OSError(errno.EEXIST, "something new is at its name")
            except FileNotFoundError:
                os.rename(private, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        return ""
    except OSError as e:
        return "; it could not be put back (%s) and is now named %s in the same folder" % (
            e.strerror,
            shown(private),
        )


def _empty(
    fd: int,
    where: str,
    allowed: Optional[AbstractSet[Tuple[int, int]]],
    keep: AbstractSet[Tuple[int, int]],
    removed: List[int],
) -> None:
    """Remove everything inside the open folder `fd`, fd-based and never following a link.
    Every entry must be one the check saw (`allowed`, by device and inode) and no keeper;
    `removed` counts what is gone (for the sentence when it stops half way)."""
    with os.scandir(fd) as it:
        names = [e.name for e in it]
    for name in names:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        key = (st.st_dev, st.st_ino)
        if key in keep:
            raise _Moved("%s/%s is a kept adapter file or folder" % (shown(where), shown(name)))
        if allowed is not None and key not in allowed:
            raise _Moved("%s/%s was not there when it was checked" % (shown(where), shown(name)))
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            try:
                sst = os.fstat(sub)
                if (sst.st_dev, sst.st_ino) != key:
                    raise _Moved(
                        "%s/%s was replaced while it was removed" % (shown(where), shown(name))
                    )
                _empty(sub, where + "/" + name, allowed, keep, removed)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
        removed[0] += 1


def remove_pinned(
    comps: List[str],
    pins: Sequence[Sequence[int]],
    allowed: Optional[AbstractSet[Tuple[int, int]]] = None,
    keep: AbstractSet[Tuple[int, int]] = frozenset(),
) -> int:
    """Remove the folder at `comps` only if it is the object that was checked; the free bytes
    of its filesystem afterwards.

    The parent is opened by fd along the pinned components; the entry is renamed to a private
    name inside that parent (so its name can no longer be swapped under us), opened with
    O_NOFOLLOW and fstat-ed against the pin, and only then emptied through that fd and removed.
    A pin mismatch renames it back (never over anything new) and raises
    WalkError('changed-since-check'); so does an entry inside that the check did not see.
    """
    if not comps:
        raise WalkError("changed-since-check", "/ cannot be removed")
    parent, pfd, _ = open_chain(comps[:-1], pins=pins[:-1])
    name = comps[-1]
    where = "/" + "/".join(comps)
    private = "%s%d-%s" % (PRIVATE_PREFIX, os.getpid(), os.urandom(8).hex())
    fd: Optional[int] = None
    removed = [0]
    try:
        try:
            os.rename(name, private, src_dir_fd=pfd, dst_dir_fd=pfd)
        except FileNotFoundError:
            raise WalkError("changed-since-check", "%s is no longer there" % shown(where)) from None
        try:
            fd = os.open(private, DIR_FLAGS, dir_fd=pfd)
            st = os.fstat(fd)
            if [st.st_dev, st.st_ino] != list(pins[-1]):
                raise _Moved(
                    "%s is not the folder that was checked (it was replaced or exchanged)"
                    % shown(where)
                )
            _empty(fd, where, allowed, keep, removed)
            os.close(fd)
            fd = None
            os.rmdir(private, dir_fd=pfd)
        except (_Moved, OSError) as e:
            close_fds(fd)
            fd = None
            done = " (%d entries inside it were already removed)" % removed[0] if removed[0] else ""
            back = put_back(pfd, private, name)
            if isinstance(e, _Moved) or e.errno in (errno.ELOOP, errno.ENOTDIR):
                why = (
                    str(e)
                    if isinstance(e, _Moved)
                    else "%s is not the folder that was checked (a link or file is in its place)"
                    % shown(where)
                )
                raise WalkError("changed-since-check", why + done + back) from None
            e.strerror = (e.strerror or str(e)) + done + back
            raise
        return fsinfo.free_bytes(pfd)
    finally:
        close_fds(fd, parent, pfd)
