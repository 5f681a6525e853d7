"""Whole-file reads and writes by file descriptor, the same way in every helper."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import stat

from fleetdeck.backend.host.lib import flags

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
