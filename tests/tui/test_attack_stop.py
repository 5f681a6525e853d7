"""Signalling a process from the Host view, attacked: a command line the probe lists with a
trailing empty argument (or a title padded with NULs) is still the listed process; a request
naming the process the helper itself runs under (the dashboard, on a local host) is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.actions.processes import confirmation, stop_process
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Process
from fleetdeck.backend.fleet.poller import Poller


def _start(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


@pytest.mark.sshd
async def test_a_loop_whose_last_argument_is_empty_is_stopped_as_listed(
    spare_fleet, tmp_path, children
):
    """`bash -c LOOP x ""`: /proc/PID/cmdline ends in two NULs; the probe lists the command with
    a trailing space, and the helper's check must join it the same way, or the listed process
    could never be stopped (refused as `changed`)."""
    loop = subprocess.Popen(
        ["bash", "-c", "while true; do sleep 0.2; done", "x", ""], start_new_session=True
    )
    children.append(loop)
    spare_fleet.add("pe")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    async with Poller(fleet) as poller:
        proc = None
        deadline = time.monotonic() + 120
        while proc is None and time.monotonic() < deadline:
            snap = (await poller.poll()).hosts[0]
            assert snap.reachable, snap.error
            proc = next((p for p in snap.processes if p.pid == loop.pid), None)
        assert proc is not None, "the loop is listed"
        assert proc.command.endswith(" x "), proc.command
        rep = await stop_process(poller.link("pe"), proc, confirmation(proc), signal="TERM")
    assert rep.ok and rep.result == "stopped", rep
    assert loop.wait(30) is not None


async def test_the_dashboard_the_helper_runs_under_is_refused_as_ours(tmp_path):
    """On a local host the helper is the dashboard's child: a request naming the dashboard (here
    this test's own process, sent the harmless CONT) is refused as `ours`, nothing signalled."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("[hosts.me]\nlocal = true\n")
    fleet = load_fleet(str(hosts))
    me = os.getpid()
    argv = Path(f"/proc/{me}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    proc = Process(
        pid=me,
        start=_start(me),
        user="root",
        command=" ".join(a.decode("utf-8", "surrogateescape") for a in argv)[:512],
    )
    async with HostLink(fleet.host("me")) as link:
        rep = await stop_process(link, proc, confirmation(proc), signal="CONT")
    assert not rep.ok and rep.reason_code == "ours", rep
    assert "runs under" in rep.message


SAVER = """
import signal, sys, time
def save(*_):
    open(sys.argv[1], "w").write("saved")
    sys.exit(0)
signal.signal(signal.SIGINT, save)
signal.signal(signal.SIGTERM, save)
open(sys.argv[1] + ".ready", "w").write("1")
while True:
    time.sleep(0.1)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()


@pytest.mark.sshd
@pytest.mark.parametrize("signal", ["INT", "TERM"])
async def test_a_paused_trainer_asked_to_end_runs_again_and_saves(
    spare_fleet, tmp_path, children, signal
):
    """STOP, then INT or TERM: the paused process gets CONT after it, so it saves and ends
    (`stopped`, its witness), rather than staying paused (INT) or being killed after the grace
    without saving (TERM)."""
    marker = tmp_path / "saved"
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(marker)], start_new_session=True)
    children.append(saver)
    deadline = time.monotonic() + 60
    while not (tmp_path / "saved.ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    spare_fleet.add("pz")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    trainer = Process(
        pid=saver.pid,
        start=_start(saver.pid),
        user="root",
        command=" ".join([sys.executable, "-c", SAVER, str(marker)]),
    )
    async with HostLink(fleet.host("pz")) as link:
        rep = await stop_process(link, trainer, confirmation(trainer), signal="STOP")
        assert rep.ok and rep.result == "paused" and _state(saver.pid) == "T", rep
        rep = await stop_process(link, trainer, confirmation(trainer), signal=signal, grace=60)
    assert rep.ok and rep.result == "stopped", rep
    assert f"SIG{signal}, SIGCONT" in rep.message
    assert saver.wait(30) == 0 and marker.read_text() == "saved"
