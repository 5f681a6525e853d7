"""Whole-file reads and writes by file descriptor, the same way in every helper."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import stat

from fleetdeck.backend.host.lib import flags
from fleetdeck.backend.host.lib.text import fsenc

READ_FLAGS = flags.READ_NOFOLLOW


class NotRegular(OSError):
    """The path names something other than a regular file (a folder, a FIFO, a device)."""


def open_regular(path: str | bytes, follow: bool = False, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file at `path` (relative to `dir_fd` when given), opened
    without blocking (a FIFO put where a file was expected answers at once instead of holding
    the reader until a writer comes), its last component never followed unless `follow`;
    anything that is not a regular file raises NotRegular."""
    how = (flags.READ if follow else READ_FLAGS) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, how, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    path: str | bytes, limit: int | None = None, dir_fd: int | None = None
) -> tuple[bytes, os.stat_result]:
    """(bytes, os.stat_result) of the regular file at `path`, its last component never followed
    (a symlink raises ELOOP); anything that is not a regular file raises NotRegular, and one
    larger than `limit` bytes (when given) raises OSError EFBIG without being read whole."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        chunks = []
        total = 0
        while limit is None or total <= limit:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
            total += len(b)
        if limit is not None and total > limit:
            raise OSError(errno.EFBIG, "larger than %d bytes" % limit, path)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data`: os.write may write fewer than asked (a short write)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


RENAME_NOREPLACE = 1


def renameat2(
    src_fd: int, src: str | bytes, dst_fd: int, dst: str | bytes, how: int
) -> bool | None:
    """renameat2(2) through libc (`how`: RENAME_NOREPLACE...): True when renamed; None where
    this libc, kernel or file system has no such call; OSError for any other failure."""
    try:
        # deferred: ctypes (a few ms on the host, and the probe carries this module on every poll)
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError, ImportError):
        return None
    if fn(src_fd, fsenc(src), dst_fd, fsenc(dst), how) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return None
    raise OSError(err, os.strerror(err), dst)
