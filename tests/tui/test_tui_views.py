"""Pilot tests of every view, fed recorded fleet snapshots through the FleetPolled path."""

from __future__ import annotations

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet import acks
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.modals.dialogs import ErrorModal, HelpScreen
from fleetdeck.tui.views.host import HostScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import NAMES, T, cell_text, feed, fixture_app, recorded


async def test_fleet_view_rows_down_host_and_stale_badge():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.keys == NAMES
        assert "DOWN" in cell_text(table, "nh3-dev", "status")
        assert "Connection refused" in cell_text(table, "nh3-dev", "status")
        # the down host keeps its last good figures, greyed
        gpus = table.get_cell("nh3-dev", "gpus")
        assert "29/48G" in gpus.plain and all(s.style == "dim" for s in gpus.spans)
        assert "STALE" in cell_text(table, "irv-ml1", "status")
        assert "STALE" not in cell_text(table, "gx10", "status")
        assert "0U" in cell_text(table, "gx10", "gpus")  # unified memory marked
        assert cell_text(table, "gx10", "stray") == "1"
        assert "run-7" in cell_text(table, "gx10", "runs")
        await pilot.press("down", "down")
        detail = app.screen.query_one("#fleet-detail").render()
        assert "nh3-dev is DOWN" in str(detail) and "Connection refused" in str(detail)


async def test_refresh_keeps_cursor_and_updates_in_place():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        await pilot.press("j", "j", "j")
        assert table.current_key == "irv-ml1"
        before = {k: table.get_row_index(k) for k in NAMES}

        def cells_changed_by(snap) -> int:
            # rows are made when drawn or read: read every row, then count what changed
            n = table.cells_changed
            app.post_message(FleetPolled(snap))
            return pilot.pause(), n

        counts = []
        snap = recorded("fleet.json")
        for _ in range(3):
            wait, n = cells_changed_by(snap)
            await wait
            [table.get_row(k) for k in NAMES]
            counts.append(table.cells_changed - n)
        assert table.current_key == "irv-ml1"
        assert {k: table.get_row_index(k) for k in NAMES} == before
        # a host coming back up changes its cells, not the table
        wait, n = cells_changed_by(recorded("fleet-earlier.json"))
        await wait
        [table.get_row(k) for k in NAMES]
        counts.append(table.cells_changed - n)
        # the same poll again touches only what each poll moves (the GPU history sparklines),
        # never the whole table; a host coming back touches more
        assert max(counts[:3]) < len(NAMES)
        assert counts[-1] > max(counts[:3]), counts
        assert "DOWN" not in cell_text(table, "nh3-dev", "status")
        assert table.current_key == "irv-ml1"


async def test_host_view_shows_processes_and_esc_goes_back():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("j", "enter")
        assert isinstance(app.screen, HostScreen) and app.screen.host_name == "ana-ml2"
        gpus = app.screen.query_one("#host-gpus", KeyedTable)
        assert "gpu0:2211" in gpus.keys and "vllm serve qwen3-32b" in cell_text(
            gpus, "gpu0:2211", "cmd"
        )
        scheds = app.screen.query_one("#host-schedules", KeyedTable)
        assert "nobody has acknowledged it" in cell_text(scheds, "loop-9c1e55aa", "stray")
        assert len(app.screen.query_one("#host-disks", KeyedTable).keys) == 2
        await pilot.press("escape")
        assert not isinstance(app.screen, HostScreen)


async def test_runs_view_shows_series_plateau_checkpoints():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        screen = app.screen
        assert (
            screen.query_one("#runs-table", KeyedTable).current_key == "gx10:/home/ops/runs/run-7"
        )
        trend = str(screen.query_one("#run-trend").render())
        assert "3.1760" in trend and "3.1730" in trend and "3.1720" in trend and "plateau" in trend
        chart = str(screen.query_one("#run-chart").render())
        assert chart.count("●") == 5 + 1 and "3.172" in chart
        ck = screen.query_one("#ckpt-table", KeyedTable)
        assert len(ck.keys) == 5 and cell_text(ck, ck.keys[0], "size") == "8.0G"
        await pilot.press("enter")  # focus moves to the checkpoints
        assert app.focused is ck
        await pilot.press("space", "j", "space")
        assert screen.marked["gx10:/home/ops/runs/run-7"] == {ck.keys[0], ck.keys[1]}
        await pilot.press("space")
        assert len(screen.marked["gx10:/home/ops/runs/run-7"]) == 1
        # the finished run: its own series
        await pilot.press("shift+tab", "j")
        assert "descending" in str(screen.query_one("#run-trend").render())


async def test_schedules_view_stray_first_and_acknowledge():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("3")
        table = app.screen.query_one("#sched-table", KeyedTable)
        assert table.keys[-1] == "ana-ml2/timer-restic"  # the acknowledged one sorts last
        assert all(cell_text(table, k, "flag") == "⚠" for k in table.keys[:-1])
        assert "does not exist on gx10" in cell_text(table, "gx10/cron-3f2a9c01", "why")
        table.move_cursor(row=table.get_row_index("ana-ml2/loop-9c1e55aa"))
        await pilot.press("a")
        await pilot.pause()
        assert acks.load_acks().covers("ana-ml2", "loop-9c1e55aa")
        rec = audit.read_audit()[-1]
        assert rec["action"] == "schedule-ack" and rec["ids"] == ["loop-9c1e55aa"]


async def test_audit_view_newest_first():
    audit.audit("purge", "gx10", "done", paths=["/a"])
    audit.audit("mirror", "ana-ml2", "verified", src="gx10:/x")
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("4")
        table = app.screen.query_one("#audit-table", KeyedTable)
        assert [cell_text(table, k, "action") for k in table.keys] == ["mirror", "purge"]
        assert "gx10:/x" in str(app.screen.query_one("#audit-detail").render())


async def test_help_opens_and_palette_lists_every_action():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "mirror the run's adapter" in str(app.screen.query_one("#help-body Static").render())
        await pilot.press("escape")
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for want in (
            "Purge checkpoints",
            "Mirror adapter",
            "Acknowledge schedule",
            "Remove schedule",
            "Launch a run",
            "Poll now",
            "Runs view",
            "Host gx10",
        ):
            assert want in titles


async def test_expected_error_is_a_toast_unexpected_an_error_modal():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        app.report_error("Purge on gx10", HostError("gx10", "connection refused", "unreachable"))
        await pilot.pause()
        assert any("connection refused" in n.message for n in app._notifications)
        assert not isinstance(app.screen, ErrorModal)
        app.report_error("Mirror", KeyError("boom"))
        await pilot.pause()
        assert isinstance(app.screen, ErrorModal)
        await pilot.press("escape")
        assert app.is_running and not isinstance(app.screen, ErrorModal)


async def test_theme_toggle_and_poll_failure_keeps_running():
    class Broken:
        async def poll(self):
            raise RuntimeError("poller bug")

    fleet = parse_fleet("[hosts.a]\nlocal = true\n", "x")
    app = FleetdeckApp(fleet, Broken(), autopoll=False, clock=lambda: T)
    async with app.run_test(size=(100, 30)) as pilot:
        dark = app.current_theme.dark
        await pilot.press("t")
        assert app.current_theme.dark is not dark
        app.poll_fleet()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert any("poller bug" in n.message for n in app._notifications)
        assert app.is_running


@pytest.mark.parametrize("size", [(100, 30), (200, 60)])
async def test_fleet_layout_fits(size):
    app = fixture_app()
    async with app.run_test(size=size) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.virtual_size.width <= size[0]


async def test_palette_commands_reach_the_views_actions():
    from fleetdeck.tui.modals.mirror import MirrorModal
    from fleetdeck.tui.modals.purge import PurgeModal
    from fleetdeck.tui.modals.remove import RemoveScheduleModal

    app = fixture_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        commands = {c.title: c.callback for c in app.get_system_commands(app.screen)}
        commands["Purge checkpoints"]()
        await pilot.pause()
        await pilot.pause()
        assert isinstance(app.screen, PurgeModal) and app.screen.paths[0].endswith("checkpoint-25")
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        await pilot.pause()
        commands["Remove schedule"]()
        await pilot.pause()
        await pilot.pause()
        assert isinstance(app.screen, RemoveScheduleModal)
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        # through the palette itself: type the command's name
        await pilot.press("1", "2", "j")  # the finished run: it has an adapter
        await pilot.press("ctrl+p")
        await pilot.press(*"Mirror adapter")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        await pilot.pause()
        assert isinstance(app.screen, MirrorModal) and app.screen.src_path.endswith("run-6/adapter")


async def test_painted_table_shows_a_changed_cell_not_a_cached_one():
    """KeyedTable caches rendered cells by the cell object: a changed cell must be painted anew."""
    from textual.geometry import Region

    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)

        def painted() -> str:
            return "\n".join(strip.text for strip in table.render_lines(Region(0, 0, *table.size)))

        assert "DOWN" in painted()
        app.post_message(FleetPolled(recorded("fleet-earlier.json")))  # nh3-dev is back up
        await pilot.pause()
        await pilot.pause()
        assert "DOWN" not in painted()


async def test_esc_from_the_purge_pop_up_keeps_the_marks():
    """Five checkpoints marked by hand, the plan refused or abandoned with esc: the marks stay
    (only a purge that deleted takes them away)."""
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        screen = app.screen
        screen.query_one("#ckpt-table", KeyedTable)
        await pilot.press("enter", "space", "j", "space")
        key = "gx10:/home/ops/runs/run-7"
        marked = set(screen.marked[key])
        assert len(marked) == 2
        await pilot.press("p")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen and screen.marked.get(key) == marked
