"""End to end: the dashboard over a real loopback sshd fleet, with its real Poller."""

from __future__ import annotations

import json

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.widgets.keyed_table import KeyedTable

pytestmark = pytest.mark.sshd


def plain(table, row, col) -> str:
    return table.get_cell(row, col).plain


async def poll(app, pilot):
    app.poll_fleet()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_poll_shows_rows_then_a_killed_host_shows_down(spare_fleet, tmp_path):
    h1 = spare_fleet.add("e1")
    spare_fleet.add("e2")
    run = h1.runs / "run 1 $(x)"
    (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (run / "progress.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "step": s,
                    "max_steps": 10,
                    "loss": 3.0 - s / 10,
                    "eval_loss": (3.1 - s / 20) if s % 2 == 0 else None,
                    "time": 1000.0 + s,
                }
            )
            + "\n"
            for s in range(1, 5)
        )
    )
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    app = FleetdeckApp(fleet, autopoll=False)
    async with app.run_test(size=(120, 35)) as pilot:
        await poll(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.keys == ["e1", "e2"]
        assert all("up" in plain(table, n, "status") for n in ("e1", "e2")), [
            plain(table, n, "status") for n in ("e1", "e2")
        ]
        await pilot.press("2")
        runs = app.screen.query_one("#runs-table", KeyedTable)
        assert runs.keys == [f"e1:{run}"]
        assert "4/10" in plain(runs, runs.keys[0], "prog")
        await pilot.press("1", "j")
        spare_fleet.kill("e2")
        await poll(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        status = plain(table, "e2", "status")
        assert "DOWN" in status and len(status.splitlines()) >= 2  # the why under it
        assert "up" in plain(table, "e1", "status")
        assert table.current_key == "e2"  # the cursor stayed on the host it was on
        detail = str(app.screen.query_one("#fleet-detail").render())
        assert "e2 is DOWN" in detail


async def test_quit_ends_within_seconds_beside_a_silent_host_a_mute_one_and_cpu_hogs(
    spare_fleet, tmp_path
):
    """The dashboard polling a host that answered and then went silent with its connection
    open (its sshd and all below it SIGSTOPped), a listener that accepts and never speaks, and
    a local host, the machine loaded: q ends it within 10 s (it takes well under 2 s) where a
    wait on either peer would never end, and nothing of it is left running in the loop (a poll
    queued before the quit once started after the poller closed, and hung the loop's close)."""
    import asyncio
    import socket
    import sys
    import time

    from support.busy import hogs

    spare_fleet.add("quiet")
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))  # refused until it listens: the first poll is not held by it
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"command_timeout": 60})
    path.write_text(
        path.read_text()
        + f'[hosts.mute]\naddress = "127.0.0.1"\nport = {mute.getsockname()[1]}\nconnect_timeout = 60\n'
        f'known_hosts = "{tmp_path / "kh"}"\n'
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{tmp_path}"]\n'
    )
    app = FleetdeckApp(load_fleet(str(path)), poll_interval=0.5)
    t0 = None
    try:
        with hogs():
            async with asyncio.timeout(None) as bound:
                async with app.run_test(size=(120, 35)) as pilot:
                    for _ in range(1200):
                        h = app.state.hosts.get("quiet")
                        if (
                            h is not None
                            and h.reachable
                            and app.state.hosts.get("local") is not None
                        ):
                            break
                        await pilot.pause(0.05)
                    assert app.state.hosts["quiet"].reachable, app.state.hosts["quiet"].error
                    mute.listen(8)
                    spare_fleet.pause("quiet")
                    for _ in range(600):  # the next attempt on "mute" waits on its silence
                        if "mute" in app.source._inflight:
                            break
                        await pilot.pause(0.05)
                    await pilot.pause(1.0)  # polls go on: "quiet" is asked and never answers
                    bound.reschedule(asyncio.get_running_loop().time() + 10)
                    t0 = time.monotonic()
                    await pilot.press("q")
            took = time.monotonic() - t0
    except TimeoutError:
        assert t0 is not None
        raise AssertionError(f"the quit still waited after {time.monotonic() - t0:.1f}s") from None
    finally:
        spare_fleet.resume("quiet")
        mute.close()
    print(f"dashboard quit with a silent host, a mute one and CPU hogs: {took:.2f}s")
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert left == [], f"still running after the quit ({took:.2f}s): {left}"


async def test_a_poll_asked_for_once_the_dashboard_closed_never_starts(tmp_path):
    """The poll timer's callback is queued (Textual's set_timer calls call_next) and can be
    flushed by the app's unmount, after its workers were cancelled and the poller closed: that
    poll started a probe nobody would end, and the loop's close cancelled it in the middle of
    its start, which never finished (the suite hung 300 s in teardown). Now no poll starts once
    the dashboard is closing, and the closed poller refuses one anyway."""
    import asyncio
    import sys

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.poller import PollerClosed

    fleet = parse_fleet(
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{tmp_path}"]\n',
        "hosts.toml",
    )
    app = FleetdeckApp(fleet, autopoll=False)
    async with app.run_test(size=(120, 35)):
        pass
    assert app.poll_fleet() is None  # what the flushed callback did
    await asyncio.sleep(0.2)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert left == [], left
    with pytest.raises(PollerClosed):
        await app.source.poll()
