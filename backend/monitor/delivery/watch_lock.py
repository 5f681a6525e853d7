"""One deliverer per state folder: the `flock` that the `watch` delivering alerts holds on
`watch.lock`, and who holds it (read without taking it)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.host.lib import procfs


def lock_path() -> Path:
    """`$XDG_STATE_HOME/fleetdeck/watch.lock`: held by the `watch` that delivers."""
    return statedir.state_dir() / "watch.lock"


class AlreadyRunning(Exception):
    """Another process holds the state folder's lock; `holder` is what it wrote there."""

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        self.path, self.holder = path, holder
        who = f"pid {holder['pid']}" if holder.get("pid") else "another process"
        since = holder.get("started")
        when = (
            time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since))
            if isinstance(since, (int, float))
            else ""
        )
        super().__init__(
            f"fleetdeck watch is already running for {path.parent} ({who}{when}, "
            f"lock {path}); one watch per state folder, so no transition is delivered twice"
        )


class StateLock:
    """An exclusive `flock` on `watch.lock`: the kernel drops it when its holder dies, however it
    dies, so a crashed watch never blocks the next one. The file says who holds it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or lock_path()
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning naming the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(self.path, read_holder(self.path) or {}) from None
        me = {
            "pid": os.getpid(),
            "start_ticks": procfs.start_ticks(os.getpid()),
            "started": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_holder(path: Path | None = None) -> dict[str, Any] | None:
    """What the lock's holder wrote (pid, start time), or None."""
    try:
        d = json.loads(statedir.read_file(path or lock_path(), 1 << 16).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def running_watch() -> dict[str, Any] | None:
    """The `watch` holding the lock now ({pid, started}), or None. Read without taking the lock,
    so a dashboard asking never makes a starting `watch` fail."""
    d = read_holder()
    if d and procfs.same_process(d.get("pid"), d.get("start_ticks")):
        return d
    return None


__all__ = ["AlreadyRunning", "StateLock", "lock_path", "read_holder", "running_watch"]
