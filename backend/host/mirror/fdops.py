"""Entries of an open folder, by descriptor, as the mirror's write end handles them: looked
up without following a link, compared by identity, removed (a whole tree, never through a
link), fsynced, and renamed without replacing what is at the new name."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import errno
import os
import stat

from fleetdeck.backend.host.lib import files
from fleetdeck.backend.host.mirror.common import DIRFLAGS

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Optional, Union


def stat_at(dir_fd: int, name: Union[str, bytes]) -> Optional[os.stat_result]:
    """lstat of `name` in the open folder `dir_fd`; None when nothing is there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def same_ids(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def remove_tree_at(dir_fd: int, name: Union[str, bytes]) -> bool:
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


def _empty_at(fd: int) -> None:
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


def fsync_fd(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:
        pass


RENAME_NOREPLACE = files.RENAME_NOREPLACE


def rename_noreplace(
    src_fd: int, src: Union[str, bytes], dst_fd: int, dst: Union[str, bytes]
) -> None:
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
