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


def read_regular(path):
    """(bytes, os.stat_result) of the regular file at `path`, its last component never followed
    (a symlink raises ELOOP); anything that is not a regular file raises NotRegular."""
    fd = os.open(path, READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file", path)
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def write_all(fd, data):
    """Write every byte of `data`: os.write may write fewer than asked (a short write)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


RENAME_NOREPLACE = 1


def renameat2(src_fd, src, dst_fd, dst, how):
    """renameat2(2) through libc (`how`: RENAME_NOREPLACE...): True when renamed; None where
    this libc, kernel or file system has no such call; OSError for any other failure."""
    try:
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
