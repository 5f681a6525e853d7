"""A big fleet stays cheap: the work a poll, a view switch and a key press do is counted, never
timed (the figures are in benchmarks/tui_big.py and SUMMARY.md).

On a 200x60 terminal a view shows a screenful of rows; a poll or a switch must make the cells
of those rows (and a few more), not of every host, schedule and run in the fleet. A key press
must not walk every schedule or run.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from rich.text import Text

from fleetdeck.backend.fleet import schedule_verdict
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run, Schedule
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.rows import fleet as fleet_rows
from fleetdeck.tui.rows import runs as runs_rows
from fleetdeck.tui.rows.fleet_cells import HostCells
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views import fleet as fleet_screen
from fleetdeck.tui.views import runs as runs_screen
from fleetdeck.tui.widgets import table_lines
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.counting import Counter

G = 1024**3
HOSTS, SCHEDULES, RUNS = 60, 3000, 600
#: a screenful of rows at 200x60 is 6 hosts of 8 GPUs, or about 45 schedules or runs; what a
#: view may make per poll or switch leaves room for a second frame's worth
SCREENFUL = {"hosts": 2 * 7, "rows": 2 * 50}


def snapshot(i: int, rng: random.Random, n_hosts: int = HOSTS) -> FleetSnapshot:
    hosts = []
    per_s, per_r = SCHEDULES // n_hosts, RUNS // n_hosts
    for h in range(n_hosts):
        name = f"gpu-{h:03d}"
        gpus = tuple(
            Gpu(
                index=g,
                name="NVIDIA H200",
                uuid=f"{name}-{g}",
                unified_memory=False,
                memory_total_mib=143771,
                memory_used_mib=rng.uniform(0, 143771),
                utilization_pct=rng.uniform(0, 100),
            )
            for g in range(8)
        )
        disks = (Disk("~/runs", "/", "ext4", 2000 * G, int(rng.uniform(0.2, 0.9) * 2000 * G), 0),)
        runs = tuple(
            Run(
                host=name,
                path=f"/runs/run-{h}-{k}",
                name=f"run-{h}-{k}",
                state="running" if k == 0 else "finished",
                step=i + k,
                max_steps=159,
                loss=2.0,
            )
            for k in range(per_r)
        )
        scheds = tuple(
            Schedule(
                id=f"c-{h:03d}{k:05d}",
                host=name,
                kind="crontab",
                user="ops",
                spec="*/5 * * * *",
                command=f"/usr/local/bin/job-{k % 7} --flag {k}",
                source="crontab",
                reasons=("duplicate",) if k % 3 else (),
                stray=bool(k % 3),
            )
            for k in range(per_s)
        )
        hosts.append(
            HostSnapshot(
                name=name,
                reachable=True,
                latency_ms=10.0,
                gpus=gpus,
                disks=disks,
                runs=runs,
                schedules=scheds,
                time=1000.0 + i,
            )
        )
    return FleetSnapshot(hosts=tuple(hosts), time=1000.0 + i)


def big_app(n_hosts: int = HOSTS, clock=lambda: 1000.0) -> tuple[FleetdeckApp, list[FleetSnapshot]]:
    rng = random.Random(7)
    snaps = [snapshot(i, rng, n_hosts) for i in range(3)]
    fleet = parse_fleet(
        "".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(n_hosts)), "big"
    )
    return FleetdeckApp(fleet, RecordedSource(snaps[:1]), autopoll=False, clock=clock), snaps


async def test_a_poll_makes_only_the_hosts_on_screen(monkeypatch):
    made = Counter(monkeypatch, HostCells, "cells")
    app, snaps = big_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        made.take()  # before any poll every row is one line: a screenful is 45 waiting hosts
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        assert 0 < made.take() <= SCREENFUL["hosts"]
        for snap in snaps[1:]:
            app.post_message(FleetPolled(snap))
            await pilot.pause()
            assert 0 < made.take() <= SCREENFUL["hosts"], "a poll made every host's cells"
        table = app.screen.query_one("#fleet-table", KeyedTable)
        # a host off screen is made when it is read, from the newest poll
        last = table.keys[-1]
        assert (
            last == f"gpu-{HOSTS - 1:03d}" and "STALE" not in table.get_cell(last, "status").plain
        )
        assert made.take() == 1
        # and when it scrolls into view
        await pilot.press("end")
        await pilot.pause()
        assert table.current_key == last and 0 < made.take() <= SCREENFUL["hosts"]
        # and a poll after a scroll back over three pages (the rows' heights as they were)
        # makes the hosts on screen now, not every host drawn since the last poll
        for _ in range(3):
            await pilot.press("pageup")
            await pilot.pause()
        made.take()
        app.post_message(FleetPolled(snaps[-1]))
        await pilot.pause()
        assert 0 < made.take() <= SCREENFUL["hosts"], "a poll made the hosts scrolled past"


async def test_the_clock_redraws_the_fleet_only_while_a_host_counts_time(monkeypatch):
    made = Counter(monkeypatch, HostCells, "cells")
    now = [1000.0]
    app, snaps = big_app(8, clock=lambda: now[0])
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        made.take()
        now[0] += 1
        app.refresh_views(tick=True)
        await pilot.pause()
        assert made.take() == 0, "the clock's tick made every host's cells again"
        # a down host counts its time: each tick makes the rows on screen again
        h0 = snaps[1].hosts[0]
        down = replace(
            snaps[1], hosts=(replace(h0, reachable=False, error="timed out"), *snaps[1].hosts[1:])
        )
        app.post_message(FleetPolled(down))
        await pilot.pause()
        table = app.screen.query_one("#fleet-table", KeyedTable)
        before = table.get_cell("gpu-000", "status").plain
        made.take()
        now[0] += 61
        app.refresh_views(tick=True)
        await pilot.pause()
        assert made.take() > 0 and table.get_cell("gpu-000", "status").plain != before


async def test_the_filter_and_the_sort_still_see_every_host(monkeypatch):
    app, snaps = big_app()
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        table = app.screen.query_one("#fleet-table", KeyedTable)
        table.set_filter("gpu-05")
        await pilot.pause()
        assert table.keys == [f"gpu-{h:03d}" for h in range(50, 60)]
        app.post_message(FleetPolled(snaps[1]))
        await pilot.pause()
        assert table.keys == [f"gpu-{h:03d}" for h in range(50, 60)]
        table.set_filter("")
        table.action_cycle_sort()
        table.action_cycle_sort()  # host, downward
        await pilot.pause()
        assert table.keys[0] == f"gpu-{HOSTS - 1:03d}" and len(table.keys) == HOSTS
        table.action_cycle_sort()
        for _ in range(2 * len(fleet_rows.COLUMNS)):
            table.action_cycle_sort()
            if table.sort_by is None:
                break
        await pilot.pause()
        assert table.keys == [f"gpu-{h:03d}" for h in range(HOSTS)] and app.screen.title is None


async def test_a_switch_and_a_poll_make_only_the_schedules_and_runs_on_screen(monkeypatch):
    why = Counter(monkeypatch, schedule_verdict, "why")
    prog = Counter(monkeypatch, runs_rows, "progress")
    app, snaps = big_app()
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        table = app.screen.query_one("#sched-table", KeyedTable)
        assert table.row_count == SCHEDULES
        # the rows on screen, and the detail line of the highlighted one
        assert 0 < why.take() <= SCREENFUL["rows"], "the switch made every schedule's row"
        # a poll with the same schedules (new objects, equal) redoes nothing
        app.post_message(FleetPolled(snaps[1]))
        await pilot.pause()
        assert why.take() == 0, "a poll with the same schedules made rows again"
        # one host's schedules changed: the rows on screen are made again, not every row
        h0 = snaps[1].hosts[0]
        changed = replace(
            snaps[1], hosts=(replace(h0, schedules=h0.schedules[1:]), *snaps[1].hosts[1:])
        )
        app.post_message(FleetPolled(changed))
        await pilot.pause()
        assert table.row_count == SCHEDULES - 1
        assert 0 < why.take() <= SCREENFUL["rows"], "a poll made every schedule's row"
        # an off-screen row read is made then, with its reason
        last_stray = table.keys[HOSTS * len([k for k in range(SCHEDULES // HOSTS) if k % 3]) - 1]
        assert "the same command runs" in table.get_cell(last_stray, "why").plain
        await pilot.press("2")
        await pilot.pause()
        runs = app.screen.query_one("#runs-table", KeyedTable)
        assert runs.row_count == RUNS and 0 < prog.take() <= SCREENFUL["rows"]
        escaped = Counter(monkeypatch, runs_screen, "shown")
        app.post_message(FleetPolled(snaps[2]))
        await pilot.pause()
        assert 0 < prog.take() <= SCREENFUL["rows"], "a poll made every run's row"
        # the same runs by name: their short labels are not worked out again
        assert escaped.take() <= SCREENFUL["rows"], "a poll escaped every run's name"


@pytest.mark.parametrize("view", ["1", "2", "3"])
async def test_a_poll_renders_no_cell_through_rich(monkeypatch, view):
    """After a poll, the changed cells are drawn by the table's direct path: no cell of a row
    (a run's progress bar was one) and no header cell (DataTable draws the header again after
    every update) goes through Rich's renderer."""
    from textual.widgets import DataTable

    slow = Counter(monkeypatch, DataTable, "_render_cell")
    app, snaps = big_app()
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        await pilot.press(view)
        await pilot.pause()
        slow.take()
        for snap in snaps[1:]:
            app.post_message(FleetPolled(snap))
            await pilot.pause()
        assert slow.take() == 0


async def test_a_key_press_does_not_walk_every_schedule_or_run(monkeypatch):
    walks = {"schedules": 0, "runs": 0}
    for name in walks:
        prop = getattr(FleetState, name)

        def counted(self, _prop=prop, _name=name):
            walks[_name] += 1
            return _prop.fget(self)

        monkeypatch.setattr(FleetState, name, property(counted))
    app, snaps = big_app()
    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        for view, table_id in (("3", "#sched-table"), ("2", "#runs-table")):
            await pilot.press(view)
            await pilot.pause()
            table = app.screen.query_one(table_id, KeyedTable)
            walks.update(schedules=0, runs=0)
            for _ in range(3):
                await pilot.press("j")
                await pilot.pause()
            assert table.cursor_row == 3
            assert walks == {"schedules": 0, "runs": 0}, f"a key press walked the fleet: {walks}"


async def test_text_cells_render_as_datatable_renders_them(monkeypatch):
    """The direct rendering of Text cells and of lines gives DataTable's own segments: every
    cell and line drawn is rendered both ways and compared (hostile names, cursor and zebra
    rows, down hosts)."""
    monkeypatch.setattr(table_lines, "_CHECK_FAST_CELLS", True)
    # the table's renderer (`TableLines`) takes the fast paths: both are counted there
    fast = Counter(monkeypatch, table_lines.TableLines, "_render_text_cell")
    lines = Counter(monkeypatch, table_lines.TableLines, "render_table_line")
    errors = []
    app, snaps = big_app(8)
    app.show_unexpected = lambda what, e: errors.append(e)
    hostile = snaps[1].hosts[0]
    snaps[1] = replace(
        snaps[1],
        hosts=(
            replace(hostile, disks=(Disk("/mnt/[red]x\x1b[31m\n", "/", "ext4", 10, 5, 0),)),
            replace(snaps[1].hosts[1], reachable=False, error="cannot connect"),
            *snaps[1].hosts[2:],
        ),
    )
    async with app.run_test(size=(200, 60)) as pilot:
        for snap in snaps:
            app.post_message(FleetPolled(snap))
            await pilot.pause()
            for key in "jj3j2j1":
                await pilot.press(key)
                await pilot.pause()
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        disk = app.screen.query_one("#fleet-table", KeyedTable).get_cell("gpu-000", "status")
        assert isinstance(disk, Text)
    assert not errors
    assert fast.n > 50 and lines.n > 500


@pytest.mark.parametrize("case", ["up", "down", "down-never-up", "stale", "waiting", "no-gpus"])
def test_a_hosts_height_is_known_without_making_its_cells(case):
    rng = random.Random(3)
    snap = snapshot(0, rng, 2)
    h = snap.hosts[0]
    state = FleetState(
        ["gpu-000", "gpu-001"], 5.0, clock=lambda: 1000.0 + (100 if case == "stale" else 0)
    )
    if case == "down":
        state.apply(snap)
    if case in ("down", "down-never-up"):
        h = replace(h, reachable=False, error="connect timed out")
    if case == "no-gpus":
        h = replace(h, gpus=(), runs=h.runs * 3)
    if case != "waiting":
        state.apply(replace(snap, hosts=(h,)))
    for width in (80, 200):
        w = fleet_screen.layout_widths(width)
        assert fleet_rows.host_cells(state, "gpu-000", w)[1] == fleet_rows.host_height(
            state, "gpu-000", w
        )


async def test_the_views_freeze_their_rows_for_the_collector_and_the_app_hands_them_back():
    import gc

    app, snaps = big_app(8)
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        assert gc.get_freeze_count() > 0  # the Fleet view, mounted, is out of the collector's way
    assert gc.get_freeze_count() == 0  # and back in it once the app has ended
