"""A command on a local host whose task is cancelled (a sibling in a gather failed first, or the
loop is closing) is killed and reaped, never left running unwatched."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from fleetdeck.backend.config import HostConfig
from fleetdeck.backend.ssh import HostLink


async def test_a_cancelled_local_command_is_killed_and_reaped(tmp_path):
    link = HostLink(HostConfig(name="here", local=True))
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    task = asyncio.create_task(link.run([sys.executable, "-c", code], timeout=300))
    for _ in range(500):
        if pidfile.exists() and pidfile.read_text():
            break
        await asyncio.sleep(0.02)
    pid = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):  # gone, and reaped (a zombie would still answer)
        os.kill(pid, 0)
