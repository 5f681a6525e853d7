"""A small real tmpfs whose every block is taken: the ENOSPC a full disk gives, for tests that
write state. Needs root (a test that uses it is marked `root`); where mounting is refused the
test is skipped with the reason."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def full_tmpfs(
    mnt: Path, prepare: Callable[[Path], object] = lambda _: None, size: str = "64k"
) -> Iterator[Path]:
    """Mount a `size` tmpfs on `mnt`, call `prepare(mnt)` (write what must exist before the
    disk is full), fill every free block with one file (`mnt/filler`), yield `mnt`, and unmount
    it afterwards, also when the test failed."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "fleetdeck-full-test", str(mnt)],
        capture_output=True,
    )
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        prepare(mnt)
        fill(mnt / "filler")
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write zeros to `path` until the file system refuses another byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
