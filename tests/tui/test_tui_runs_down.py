"""A run whose host stopped answering is shown as its host's last answer, and says so: its row
dimmed with its state marked `✖` and no pace or ETA, and its detail pane naming the host, why
and how old the figures are. A run said to be running may have died with its host."""

from __future__ import annotations

from dataclasses import replace

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

HOSTS = 3


def snapshot(i: int) -> FleetSnapshot:
    hosts = tuple(
        HostSnapshot(
            name=f"gpu-{h:03d}",
            reachable=True,
            latency_ms=10.0,
            runs=(
                Run(
                    host=f"gpu-{h:03d}",
                    path=f"/runs/run-{h}-0",
                    name=f"run-{h}-0",
                    state="running",
                    step=10 + i,
                    max_steps=159,
                    loss=2.0,
                    seconds_per_step=1.5,
                    eta_seconds=200.0,
                ),
            ),
            time=1000.0 + i,
        )
        for h in range(HOSTS)
    )
    return FleetSnapshot(hosts=hosts, time=1000.0 + i)


def _app(now):
    snaps = [snapshot(i) for i in range(3)]
    fleet = parse_fleet(
        "".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(HOSTS)), "three"
    )
    app = FleetdeckApp(fleet, RecordedSource(snaps[:1]), autopoll=False, clock=lambda: now[0])
    return app, snaps


async def test_a_down_hosts_runs_are_dimmed_marked_and_say_how_old_they_are():
    now = [1000.0]
    app, snaps = _app(now)
    async with app.run_test(size=(160, 40)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        key = next(k for k in table.keys if "run-0-0" in k)
        assert table.get_cell(key, "state").plain == "running"
        assert str(table.get_cell(key, "eta")) != "-"
        h0 = snaps[1].hosts[0]
        down = replace(
            snaps[1], hosts=(replace(h0, reachable=False, error="timed out"), *snaps[1].hosts[1:])
        )
        now[0] += 45
        app.post_message(FleetPolled(down))
        await pilot.pause()
        assert table.get_cell(key, "state").plain == "running ✖"
        assert str(table.get_cell(key, "sps")) == "-" == str(table.get_cell(key, "eta"))
        other = next(k for k in table.keys if "run-1-0" in k)
        assert table.get_cell(other, "state").plain == "running"  # its host answered
        table.move_cursor(row=table.keys.index(key))
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").render())
        assert "✖ gpu-000 did not answer" in title and "its last answer" in title, title
        # it answers again: the row is live once more
        app.post_message(FleetPolled(snaps[2]))
        await pilot.pause()
        assert table.get_cell(key, "state").plain == "running"
        assert "did not answer" not in str(app.screen.query_one("#run-title").render())
