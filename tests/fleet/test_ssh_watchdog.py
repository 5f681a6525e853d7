"""A resident helper dies on the host when the controller stops listening: a hung probe cut off
by its timeout must not stay behind burning CPU (real sshd, real processes)."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink

from support.sshfleet import _descendants

pytestmark = pytest.mark.sshd

# answers once, then spins on the CPU forever (in a child of its own session too: a process
# group would not hold it), never reading stdin again
HANGS = """\
import json, os, sys
sys.stdin.readline()
sys.stdout.write(json.dumps({"pid": os.getpid()}) + "\\n"); sys.stdout.flush()
if os.fork() == 0:
    os.setsid()
    while True: pass
while True: pass
"""


def _with_token(token: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


async def _gone(token: str, rounds: int = 100) -> list[int]:
    for _ in range(rounds):
        left = _with_token(token)
        if not left:
            return []
        await asyncio.sleep(0.1)
    return _with_token(token)


async def test_closing_a_resident_helper_kills_it_and_its_children_on_the_host(
    sshd_fleet, fleet_file
):
    token = f"fleetdeck-test-{uuid.uuid4().hex}"
    link = HostLink(load_fleet(str(fleet_file)).host("h3"))
    try:
        helper = await link.start_helper(HANGS, ["--resident", token])
        await helper.send_json({"op": "go"})
        answer = await asyncio.wait_for(helper.recv_json(), 20)
        for _ in range(100):  # the child is forked after the answer
            pids = _with_token(token)
            if len(pids) == 2:
                break
            await asyncio.sleep(0.1)
        assert answer["pid"] in pids and len(pids) == 2  # the helper and its spinning child
        assert set(pids) <= set(_descendants(sshd_fleet.hosts["h3"].proc.pid))
        helper.close()  # what the poller does when a probe does not answer in time
        assert await _gone(token) == []
        assert (await link.run(["true"])).returncode == 0  # the connection itself lives on
    finally:
        await link.close()
        for pid in _with_token(token):  # whatever a failed run left behind
            os.kill(pid, 9)


async def test_a_one_shot_helper_cut_off_by_its_timeout_dies_on_the_host(sshd_fleet, fleet_file):
    from fleetdeck.backend.fleet.errors import HostError

    token = f"fleetdeck-test-{uuid.uuid4().hex}"
    spin = f"import sys\nsys.stdin.read()\ntoken = {token!r}\nwhile True:\n    pass\n"
    sshd = sshd_fleet.hosts["h2"].proc.pid
    link = HostLink(load_fleet(str(fleet_file)).host("h2"))
    try:
        with pytest.raises(HostError) as e:
            await link.run_helper(spin, {}, timeout=1.5)
        assert e.value.code == "timeout"
        for _ in range(100):
            left = [p for p in _descendants(sshd) if _spins(p)]
            if not left:
                break
            await asyncio.sleep(0.1)
        assert left == [], "the helper is still spinning on the host"
    finally:
        await link.close()


async def test_a_one_shot_helper_whose_task_is_cancelled_dies_on_the_host(sshd_fleet, fleet_file):
    """A sibling failed first (mirror's two listings) or the loop is closing: the helper's task is
    cancelled, and the helper must not run on, unwatched, on a connection that lives on."""
    spin = "import sys\nsys.stdin.read()\nwhile True:\n    pass\n"
    sshd = sshd_fleet.hosts["h2"].proc.pid
    link = HostLink(load_fleet(str(fleet_file)).host("h2"))
    try:
        task = asyncio.create_task(link.run_helper(spin, {}, timeout=300))
        for _ in range(200):
            if [p for p in _descendants(sshd) if _spins(p)]:
                break
            await asyncio.sleep(0.05)
        assert [p for p in _descendants(sshd) if _spins(p)], "the helper never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            left = [p for p in _descendants(sshd) if _spins(p)]
            if not left:
                break
            await asyncio.sleep(0.1)
        assert left == [], "the helper is still spinning on the host"
        assert (await link.run(["true"])).returncode == 0  # the connection itself lives on
    finally:
        await link.close()


def _spins(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"--tied" in f.read()
    except OSError:
        return False


async def test_a_command_without_input_reads_end_of_file(sshd_fleet, fleet_file):
    async with HostLink(load_fleet(str(fleet_file)).host("h2")) as link:
        res = await link.run(["cat"], timeout=10)
    assert (res.returncode, res.stdout) == (0, b"")
