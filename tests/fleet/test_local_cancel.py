"""A command on a local host whose task is cancelled (a sibling in a gather failed first, or the
loop is closing) is killed and reaped, never left running unwatched."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.link.ssh import HostLink


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


async def test_a_mirror_whose_one_side_fails_leaves_no_work_running_for_the_other(tmp_path):
    """The destination refuses at once while the source is still being asked (its host accepts
    the connection and never speaks): the mirror's report comes back with the source's side
    cancelled, not still waiting in the background."""
    import socket

    from fleetdeck.backend.actions.mirror.main import mirror

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts into the backlog, never sends an SSH banner
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port_refused = refused.getsockname()[1]
    refused.close()  # nobody listens there: connection refused
    try:
        src = HostLink(
            HostConfig(
                name="mute",
                address="127.0.0.1",
                port=silent.getsockname()[1],
                connect_timeout=60,
                known_hosts=str(tmp_path / "kh"),
            )
        )
        dst = HostLink(
            HostConfig(
                name="gone",
                address="127.0.0.1",
                port=port_refused,
                connect_timeout=60,
                known_hosts=str(tmp_path / "kh"),
            )
        )
        report = await mirror(src, "/srv/adapter", dst, "/srv/copy", dry_run=True)
        assert report.result == "failed" and "gone" in (report.error or "")
        others = [
            t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()
        ]
        assert others == [], others
    finally:
        silent.close()


async def test_every_task_cancelled_at_once_while_local_probes_start_always_finishes():
    """What a closing event loop does (asyncio.run, pytest's teardown): every task cancelled at
    once, the loop's own among them, at any moment of a poll of a local host, the probe's start
    included. asyncio's create_subprocess_exec, cancelled so while it connected the pipes,
    waited for ever (the dashboard's test hung 300 s in teardown): each round here must end
    within 10 s, where the old start never ended. Beside CPU hogs."""
    import random
    import time

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.poller import Poller

    from support.busy import hogs

    fleet = parse_fleet(
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["/nonexistent"]\n',
        "hosts.toml",
    )
    me = asyncio.current_task()
    rng = random.Random(31)
    with hogs():
        for round_ in range(40):
            before = asyncio.all_tasks()
            poller = Poller(fleet)
            asyncio.ensure_future(poller.poll())
            await asyncio.sleep(rng.uniform(0, 0.02))
            mine = [t for t in asyncio.all_tasks() - before if t is not me]
            for t in mine:
                t.cancel()
            t0 = time.monotonic()
            _, pending = await asyncio.wait(mine, timeout=10) if mine else (set(), set())
            took = time.monotonic() - t0
            assert not pending, (
                f"round {round_}: still cancelling after {took:.1f}s: "
                f"{sorted(t.get_coro().__qualname__ for t in pending)}"
            )
            await poller.close()
