"""The Stop pop-up as an operator meets a hostile program name: what it asks to be typed is
the text it shows (escaped), and "stopped" comes with its witness, the pid with its start time
gone (a real process on this machine, stopped by the `local` host's helper)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from textual.widgets import Button, Input, Label

from fleetdeck.backend.actions.processes import SIGNALS
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Process
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.modals.stop import StopProcessModal
from fleetdeck.tui.sources import RecordedSource

from support.recorded import feed

EVIL = "\x1b[2J\nevil"


def _start(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


async def test_the_stop_pop_up_asks_for_the_name_as_shown_and_names_the_witness(children):
    # a shell loop whose argv[0] clears the screen and starts a new line
    p = subprocess.Popen(
        [EVIL, "-c", "while true; do sleep 0.2; done"],
        executable="/bin/bash",
        start_new_session=True,
    )
    children.append(p)
    time.sleep(0.3)
    argv = Path(f"/proc/{p.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    proc = Process(
        pid=p.pid,
        start=_start(p.pid),
        user="root",
        command=" ".join(a.decode() for a in argv),
        why=("loop",),
    )
    fleet = parse_fleet(f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\n', "fixture")
    snap = FleetSnapshot(hosts=(HostSnapshot(name="local", reachable=True, time=1.0),), time=1.0)
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, 1)
        app.push_screen(StopProcessModal("local", proc))
        await pilot.pause()
        asks = [
            str(lb.render()) for lb in app.screen.query(Label) if "to confirm" in str(lb.render())
        ]
        shown = f"{p.pid} \\x1b[2J\\nevil"  # what the pop-up shows, escaped
        assert asks == [f"Type {shown} to confirm:"]
        act = app.screen.query_one("#act", Button)
        field = app.screen.query_one("#stop-confirm", Input)
        field.value = f"{p.pid} {EVIL}"  # the raw bytes no one can type: not what it asks
        await pilot.pause()
        assert act.disabled
        field.value = shown  # typed back exactly as shown
        await pilot.pause()
        assert not act.disabled
        await pilot.click("#act")
        await app.workers.wait_for_complete()
        await pilot.pause()
        rep = app.screen.result
        assert rep.ok and rep.result == "stopped", rep
        assert rep.message == (
            f"process {p.pid} stopped (SIGTERM): pid {p.pid} with start time {proc.start} "
            "is gone from the host's /proc"
        )
    assert p.wait(10) is not None


async def test_the_signal_chooser_pauses_a_real_process_with_the_state_the_host_read(children):
    """K's pop-up offers TERM (the default), INT, HUP, STOP, CONT and KILL; STOP chosen with the
    keys pauses a real loop (state T in /proc), the button saying what it will send."""
    from textual.widgets import Select

    p = subprocess.Popen(["bash", "-c", "while true; do sleep 0.2; done"], start_new_session=True)
    children.append(p)
    time.sleep(0.3)
    proc = Process(
        pid=p.pid,
        start=_start(p.pid),
        user="root",
        command="bash -c while true; do sleep 0.2; done",
        why=("loop",),
    )
    fleet = parse_fleet(f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\n', "fixture")
    snap = FleetSnapshot(hosts=(HostSnapshot(name="local", reachable=True, time=1.0),), time=1.0)
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, 1)
        app.push_screen(StopProcessModal("local", proc))
        await pilot.pause()
        act = app.screen.query_one("#act", Button)
        chooser = app.screen.query_one("#stop-signal", Select)
        assert chooser.value == "TERM" and str(act.label) == f"Stop process {p.pid} (SIGTERM)"
        assert list(SIGNALS) == [
            "TERM",
            "INT",
            "HUP",
            "STOP",
            "CONT",
            "KILL",
        ]  # the chooser's order
        chooser.focus()
        await pilot.press("enter", "down", "down", "down", "enter")
        await pilot.pause()
        assert chooser.value == "STOP" and str(act.label) == f"Send SIGSTOP to process {p.pid}"
        assert act.disabled  # still nothing until the pid and program are typed
        region = app.screen.query_one("#act").region
        assert region.area and region.bottom <= 24 and region.right <= 80  # on screen at 80x24
        app.screen.query_one("#stop-confirm", Input).value = f"{p.pid} bash"
        await pilot.pause()
        await pilot.click("#act")
        await app.workers.wait_for_complete()
        await pilot.pause()
        rep = app.screen.result
        assert rep.ok and rep.result == "paused", rep
        state = Path(f"/proc/{p.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        assert state == b"T" and p.poll() is None
        assert chooser.disabled
