"""CPU hogs started beside one test case (the suite's own `FLEETDECK_TEST_LOAD` loads a whole
session): a case that must hold on a loaded machine runs with them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

#: a busy loop that also allocates and frees, so the scheduler and the allocator are both loaded
HOG = "import os\nwhile True:\n    sum(i * i for i in range(20000)); bytearray(1 << 20)\n"


@contextlib.contextmanager
def hogs(n: int | None = None) -> Iterator[list[int]]:
    """`n` busy processes (default: one per CPU, at least 2) for the `with` block, killed at
    its end, also when it fails; yields their pids."""
    n = n if n is not None else max(2, os.cpu_count() or 2)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOG],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(n)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
