"""The describe pop-up's whole command line of a process, read on the host through a real local
link: shown when the pid is still the process the probe saw (its start time, read by the host
library's own /proc/PID/stat reader), refused when the pid now names another."""

from __future__ import annotations

import subprocess
import sys

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import procfs
from fleetdeck.tui.modals.describe import cmdline_sources

LOCAL = HostConfig(name="local", local=True, python=sys.executable, command_timeout=20)
# a command name with a space and a ')' in it: the start time is found after the last ')'
NAME = "sleepy) x"


async def test_the_whole_command_line_of_the_same_process_and_not_of_another(tmp_path):
    exe = tmp_path / NAME
    exe.symlink_to(sys.executable)
    p = subprocess.Popen([str(exe), "-c", "import time; time.sleep(60)", "--flag", "two words"])
    try:
        start = procfs.stat(p.pid)[3]
        link = HostLink(LOCAL)
        ((title, text),) = await cmdline_sources(link, p.pid, start, "the run's process")
        assert title.startswith("the whole command line") and "two words" in text.splitlines()
        ((title, text),) = await cmdline_sources(link, p.pid, start + 1, "the run's process")
        assert text == f"(pid {p.pid} is not the run's process now: it ended since the poll)"
        await link.close()
    finally:
        p.kill()
        p.wait()


def test_the_start_time_is_read_after_the_last_parenthesis():
    data = b"41 (a) b) c) S 1 41 41 0 -1 4194560 1 0 0 0 2 3 0 0 20 0 1 0 777 9 9"
    assert procfs.start_ticks_of_stat(data) == 777
    assert procfs.start_ticks_of_stat(b"(could not be read: gone)") is None
    assert procfs.start_ticks_of_stat(b"no parenthesis") is None
