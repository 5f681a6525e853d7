"""The Fleet view's Live runs cell says what `status` says: a stalled run in words, and the
failed runs counted (before: `Srun-9`, and `-` for a host whose `status` said "2 failed")."""

from __future__ import annotations

import pytest

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.rows.fleet import host_height
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import cell_text, feed


def _run(host: str, name: str, state: str, step: int | None = None) -> Run:
    return Run(
        host=host,
        path=f"/runs/{name}",
        name=name,
        state=state,
        step=step,
        max_steps=100,
        reason="no progress for 40m" if state == "stalled" else None,
    )


def _app() -> FleetdeckApp:
    busy = HostSnapshot(
        name="busy",
        reachable=True,
        time=1.0,
        runs=(
            _run("busy", "run-3", "running", 45),
            _run("busy", "run-9", "stalled", 12),
            _run("busy", "run-1", "failed"),
            _run("busy", "run-2", "failed"),
            _run("busy", "run-0", "finished"),
        ),
    )
    broke = HostSnapshot(
        name="broke",
        reachable=True,
        time=1.0,
        runs=(
            _run("broke", "run-5", "failed"),
            _run("broke", "run-6", "failed"),
            _run("broke", "run-4", "finished"),
        ),
    )
    idle = HostSnapshot(
        name="idle", reachable=True, time=1.0, runs=(_run("idle", "run-8", "finished"),)
    )
    snap = FleetSnapshot(hosts=(busy, broke, idle), time=1.0)
    fleet = parse_fleet(
        "".join(f"[hosts.{n}]\nlocal = true\n" for n in ("busy", "broke", "idle")), "fixture"
    )
    return FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)


@pytest.mark.parametrize("size", [(120, 30), (80, 24)])
async def test_live_runs_say_stalled_in_words_and_count_the_failed(size):
    app = _app()
    async with app.run_test(size=size) as pilot:
        await feed(app, pilot, 1)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        busy = cell_text(table, "busy", "runs").split("\n")
        assert busy[0].startswith("▶run-3") and "45%" in busy[0]
        assert busy[1].startswith("‖run-9 stalled"), busy
        assert busy[2] == "✖ 2 failed"
        assert cell_text(table, "broke", "runs") == "✖ 2 failed"
        assert cell_text(table, "idle", "runs") == "-"
        # the rows are laid out as tall as their cells
        assert host_height(app.state, "busy", app.screen._widths) == 3
        assert host_height(app.state, "broke", app.screen._widths) == 1
