"""Where the controller keeps its state: `$XDG_STATE_HOME/fleetdeck` (the audit log, the
acknowledged schedules, alert and poll history, seat checks, the watch lock)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: what a state or config file may hold before it is refused unread
READ_LIMIT = 64 * 2**20


def state_dir() -> Path:
    """`$XDG_STATE_HOME/fleetdeck` (default `~/.local/state/fleetdeck`), created on demand."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    d = Path(base) / "fleetdeck"
    d.mkdir(parents=True, exist_ok=True)
    return d


def read_file(path: Path | str, limit: int = READ_LIMIT) -> bytes:
    """The bytes of a state or config file, read as a file: opened without blocking (a FIFO or a
    device put where the file was never hangs a command or the dashboard), refused unless it is
    a regular file (a link to one is one), and refused past `limit` bytes. Raises
    FileNotFoundError when there is none, and OSError with a sentence otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, a device or a folder)")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"it is {st.st_size} bytes, past the {limit}-byte limit")
        chunks, total = [], 0
        while total <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
        if total > limit:
            raise OSError(errno.EFBIG, f"it grew past the {limit}-byte limit")
        return b"".join(chunks)
    finally:
        os.close(fd)
