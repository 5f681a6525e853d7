"""The console keys every table has: `/` filters (any case, over what the rows show; esc
clears), `o` cycles the sort column and direction; both named in the title."""

from __future__ import annotations

from fleetdeck.tui.modals.filter_prompt import FilterPrompt
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import NAMES, cell_text, feed, fixture_app


async def test_filter_narrows_the_table_as_one_types_and_esc_clears_it():
    app = fixture_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.keys == NAMES
        await pilot.press("slash")
        assert isinstance(app.screen, FilterPrompt)
        await pilot.press("G", "X")
        await pilot.pause()
        assert table.keys == ["gx10"]
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, FilterPrompt)
        assert "filter 'GX' (1 of 4)" in (app.screen.title or "")
        # a poll keeps the filter: the new rows go through it too
        await feed(app, pilot, 1)
        assert table.keys == ["gx10"]
        # esc on the table clears the filter first, and only then goes back
        table.focus()
        await pilot.press("escape")
        await pilot.pause()
        assert table.keys == NAMES and app.screen.title is None
        # a filter matching nothing shows no rows, and esc in the prompt clears it
        await pilot.press("slash", "z", "z", "z")
        await pilot.pause()
        assert table.keys == []
        await pilot.press("escape")
        await pilot.pause()
        assert table.keys == NAMES


async def test_sort_cycles_columns_and_direction_and_says_so():
    app = fixture_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        table.focus()
        await pilot.press("o")
        await pilot.pause()
        assert table.keys == sorted(NAMES)
        assert "sorted by Host ↑" in app.screen.title
        await pilot.press("o")
        await pilot.pause()
        assert table.keys == sorted(NAMES, reverse=True)
        assert "sorted by Host ↓" in app.screen.title
        # through every column and back to the view's own order
        for _ in range(2 * len(table.columns) - 1):
            await pilot.press("o")
        await pilot.pause()
        assert table.keys == NAMES and app.screen.title is None


async def test_the_runs_view_filters_on_what_its_rows_show():
    app = fixture_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        table = next(t for t in app.screen.query(KeyedTable) if t.row_count)
        states = {k: cell_text(table, k, "state") for k in table.keys}
        wanted = [k for k, v in states.items() if "running" in v.casefold()]
        assert wanted and len(wanted) < len(states)
        table.focus()
        await pilot.press("slash", *"RUNNING", "enter")
        await pilot.pause()
        assert sorted(table.keys) == sorted(wanted)


async def test_f_follows_train_log_live_escaped_and_f_again_stops_the_reader(tmp_path):
    import asyncio
    import json
    import os

    from textual.widgets import Log

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp

    root = tmp_path / "runs"
    run = root / "run-1"
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text(
        json.dumps({"step": 1, "loss": 2.0, "max_steps": 10}) + "\n"
    )
    log = run / "train.log"
    log.write_text("step 1\n")
    fleet = parse_fleet(
        f'[hosts.here]\nlocal = true\nruns = ["{root}"]\npoll_interval = 2\n', "test"
    )
    app = FleetdeckApp(fleet)

    def helpers() -> list[int]:
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                    stat = open(f"/proc/{pid}/stat", "rb").read()
                except OSError:
                    continue
                ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
                # this dashboard's own readers: local helpers are its children
                if ppid == os.getpid() and b"fleetdeck-helper" in cmd and b"--tied" in cmd:
                    out.append(int(pid))
        return out

    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            await pilot.pause(0.1)
            if app.state.polls:
                break
        await pilot.press("2")
        for _ in range(50):
            await pilot.pause(0.1)
            if app.screen.selected is not None:
                break
        await pilot.pause(0.5)
        others = set(
            helpers()
        )  # the dashboard's own (seats, the probe's...), and the tail's reader
        await pilot.press("f")
        pane = app.screen.query_one("#run-log", Log)
        for _ in range(100):
            await pilot.pause(0.1)
            if "step 1" in "\n".join(pane.lines):
                break
        assert "following" in str(app.screen.query_one("#run-log-label").render())
        with open(log, "a") as f:
            f.write("step 2 \x1b]52;c;SGVsbG8=\x07\n")
        for _ in range(100):
            await pilot.pause(0.1)
            if any("step 2" in line for line in pane.lines):
                break
        got = [line for line in pane.lines if "step 2" in line]
        assert got == ["step 2 \\x1b]52;c;SGVsbG8=\\x07"]
        follower = set(helpers()) - others
        assert follower, "a reader follows the log"
        await pilot.press("f")
        for _ in range(50):
            await pilot.pause(0.1)
            if not follower & set(helpers()):
                break
        assert not follower & set(helpers()), "f again ends the reader"
        assert "f follows" in str(app.screen.query_one("#run-log-label").render())
        await asyncio.sleep(0)


async def test_the_distributions_entries_fold_into_one_row_per_host_and_s_lists_them():
    import dataclasses

    from fleetdeck.backend.fleet.models import Schedule
    from fleetdeck.tui.messages import FleetPolled
    from fleetdeck.tui.rows.schedules import FOLDED

    from support.recorded import recorded

    snap = recorded("fleet.json")
    host = snap.hosts[0]
    system = tuple(
        Schedule(
            id=f"c-sys{i}",
            host=host.name,
            kind="cron-file",
            user="root",
            spec="@daily",
            command=f"/usr/lib/pkg/job{i}",
            source="/etc/cron.d/pkg",
            system=True,
        )
        for i in range(3)
    )
    snap = dataclasses.replace(
        snap, hosts=(dataclasses.replace(host, schedules=host.schedules + system), *snap.hosts[1:])
    )
    app = fixture_app()
    async with app.run_test(size=(120, 34)) as pilot:
        app.post_message(FleetPolled(snap))
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        table = app.screen.query_one("#sched-table", KeyedTable)
        assert FOLDED + host.name in table.keys
        assert not [k for k in table.keys if "c-sys" in k]
        assert "3 entries the distribution installed" in cell_text(table, FOLDED + host.name, "cmd")
        # on the folded row, a and x say what it is rather than "nothing selected"
        table.move_cursor(row=table.keys.index(FOLDED + host.name))
        await pilot.pause()
        assert "s lists them one by one" in app.screen.nothing_selected()
        await pilot.press("s")
        await pilot.pause()
        assert FOLDED + host.name not in table.keys
        assert len([k for k in table.keys if "c-sys" in k]) == 3


async def test_the_host_view_lists_processes_and_k_asks_for_the_pid_and_program():
    import dataclasses

    from textual.widgets import Button, Input

    from fleetdeck.backend.fleet.models import Process
    from fleetdeck.tui.messages import FleetPolled
    from fleetdeck.tui.modals.stop import StopProcessModal

    from support.recorded import recorded

    snap = recorded("fleet.json")
    host = snap.hosts[0]
    procs = (
        Process(
            pid=4242,
            start=99,
            user="ops",
            command="/usr/bin/python3 train.py \x1b[2J",
            cpu_pct=97.0,
            rss_bytes=3 << 30,
            gpu_mib=20_000.0,
            why=("gpu", "run"),
        ),
    )
    snap = dataclasses.replace(
        snap, hosts=(dataclasses.replace(host, processes=procs), *snap.hosts[1:])
    )
    app = fixture_app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(FleetPolled(snap))
        await pilot.pause()
        await pilot.press("enter")  # the Host view of the highlighted (first) host
        await pilot.pause()
        table = app.screen.query_one("#host-procs", KeyedTable)
        assert table.keys == ["4242:99"]
        assert cell_text(table, "4242:99", "cmd") == "/usr/bin/python3 train.py \\x1b[2J"
        assert cell_text(table, "4242:99", "why") == "gpu, run"
        table.focus()
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, StopProcessModal)
        act = app.screen.query_one("#act", Button)
        assert act.disabled
        app.screen.query_one("#stop-confirm", Input).value = "4242"
        await pilot.pause()
        assert act.disabled
        app.screen.query_one("#stop-confirm", Input).value = "4242 python3"
        await pilot.pause()
        assert not act.disabled and "Stop process 4242" in str(act.label)


async def test_the_history_view_draws_a_hosts_recorded_night_and_changes_host_and_window():
    import time

    from support.history import _night

    _night(time.time())
    app = fixture_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("6")
        await pilot.pause()
        table = app.screen.query_one("#history-chart").content
        cells = " ".join(str(c) for col in table.columns for c in col._cells)
        assert "GPU0 memory" in cells and "disk /tank" in cells and "run-\\x1b[2J7 loss" in cells
        assert "gx10: the last 1d00h" in str(table.title)
        await pilot.press("minus")
        await pilot.pause()
        assert "gx10: the last 6h00m" in str(app.screen.query_one("#history-chart").content.title)
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert "Nothing recorded for ana-ml2" in str(app.screen.query_one("#history-chart").content)


async def test_resume_is_offered_only_where_a_checkpoint_exists():
    import dataclasses

    from fleetdeck.backend.fleet.models import Checkpoint, Run
    from fleetdeck.tui.messages import FleetPolled

    from support.recorded import recorded

    snap = recorded("fleet.json")
    host = snap.hosts[0]
    bare = Run(
        host=host.name, path="/runs/run-bare", name="run-bare", state="failed", reason="CUDA OOM"
    )
    kept = dataclasses.replace(
        bare,
        path="/runs/run-kept",
        name="run-kept",
        checkpoints=(
            Checkpoint(path="/runs/run-kept/checkpoints/checkpoint-25", step=25, bytes=1 << 30),
        ),
    )
    snap = dataclasses.replace(
        snap, hosts=(dataclasses.replace(host, runs=(bare, kept)), *snap.hosts[1:])
    )
    app = fixture_app()
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        app.post_message(FleetPolled(snap))
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        table.move_cursor(row=table.keys.index(f"{host.name}:/runs/run-bare"))
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").content)
        assert "no checkpoint to resume from" in title and "r: resume" not in title
        await pilot.press("r")
        await pilot.pause()
        assert any("no checkpoint to resume from" in n.message for n in app._notifications)
        table.move_cursor(row=table.keys.index(f"{host.name}:/runs/run-kept"))
        await pilot.pause()
        assert "r: resume from checkpoint-25" in str(app.screen.query_one("#run-title").content)


async def test_toasts_never_cover_a_pop_ups_buttons_at_80x24():
    from textual.widgets import Button

    from fleetdeck.backend.fleet.models import Process
    from fleetdeck.tui.modals.stop import StopProcessModal

    app = fixture_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await feed(app, pilot)
        app.push_screen(
            StopProcessModal("gx10", Process(pid=7, start=1, user="ops", command="python3 x"))
        )
        await pilot.pause()
        for i in range(3):
            app.notify(
                f"a long warning number {i} " * 4, title="Alerts", severity="warning", timeout=30
            )
        await pilot.pause(0.5)
        # what of each toast is on screen (the rack clips and scrolls what does not fit)
        geometry = [app.screen.find_widget(t) for t in app.screen.query("Toast")]
        toasts = [g.region.intersection(g.clip) for g in geometry]
        assert any(t.area for t in toasts), "the toasts are shown on the pop-up"
        for b in app.screen.query(Button):
            for t in toasts:
                assert not b.region.overlaps(t), (str(b.label), b.region, t)


async def test_the_history_view_shows_the_dashboards_own_first_polls_at_once(tmp_path, monkeypatch):
    """The dashboard records history as it polls; its History view reads through that recorder,
    so the minute in progress is there on the first visit, not a minute later."""
    from rich.table import Table

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "runs").mkdir()
    fleet = parse_fleet(f'[hosts.here]\nlocal = true\nruns = ["{tmp_path}/runs"]\n', "x")
    app = FleetdeckApp(fleet)
    async with app.run_test(size=(140, 40)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if app.state.polls:
                break
        assert app.state.polls, "the first poll did not come"
        await pilot.press("6")
        await pilot.pause()
        chart = app.screen.query_one("#history-chart").content
        assert isinstance(chart, Table), chart
        assert "here: the last 1d00h" in str(chart.title)
