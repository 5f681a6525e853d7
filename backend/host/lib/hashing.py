"""sha256 streaming over file descriptors, never following a symlink."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from fleetdeck.backend.host.lib import flags

FILE_FLAGS = flags.READ_NOFOLLOW
CHUNK = 1 << 20


def sha256_fd(
    fd: int, chunk: int = CHUNK, each: Callable[[bytes], object] | None = None
) -> tuple[str, int]:
    """(sha256 hex, bytes read) of an open file, from its current offset to its end; `each`, if
    given, is called with every chunk as it is read (a copy that hashes what it sends)."""
    h = hashlib.sha256()
    n = 0
    while True:
        b = os.read(fd, chunk)
        if not b:
            break
        h.update(b)
        n += len(b)
        if each is not None:
            each(b)
    return h.hexdigest(), n


def sha256_at(dir_fd: int, name: str) -> str:
    """sha256 of the regular file `name` in the folder `dir_fd` (a symlink raises ELOOP)."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    try:
        return sha256_fd(fd)[0]
    finally:
        os.close(fd)
