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
    (run / "progress.jsonl").write_text("".join(
        json.dumps({"step": s, "max_steps": 10, "loss": 3.0 - s / 10, "eval_loss": (3.1 - s / 20) if s % 2 == 0 else None,
                    "time": 1000.0 + s}) + "\n" for s in range(1, 5)))
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    app = FleetdeckApp(fleet, autopoll=False)
    async with app.run_test(size=(120, 35)) as pilot:
        await poll(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.keys == ["e1", "e2"]
        assert all("up" in plain(table, n, "status") for n in ("e1", "e2")), \
            [plain(table, n, "status") for n in ("e1", "e2")]
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
