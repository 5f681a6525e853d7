"""At 80x24 the columns that matter stay on screen, minor ones go first, shortened names stay
distinct, and no Markdown or raw tool stderr reaches the screen."""

from __future__ import annotations

import random

import pytest
from rich.text import Text

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.show.fmt import shorten_unique
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import feed, fixture_app, visible_columns, with_seats


@pytest.mark.parametrize(
    "view,table_id,must,minor",
    [
        ("1", "fleet-table", ["host", "status", "gpus", "runs", "stray"], ["lat", "disks"]),
        ("2", "runs-table", ["host", "name", "state", "prog"], ["sps", "eval"]),
        ("3", "sched-table", ["flag", "host", "why", "cmd"], ["user", "kind"]),
    ],
)
async def test_important_columns_stay_at_80x24(view, table_id, must, minor):
    app = fixture_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press(view)
        table = app.screen.query_one(f"#{table_id}", KeyedTable)
        shown = visible_columns(table, table.size.width)
        for key in must:
            assert key in shown, (key, shown)
        assert not set(minor) & {c.key.value for c in table.ordered_columns}
        assert table.virtual_size.width <= table.size.width  # nothing hidden to the right
        # and back at 200 columns every column is there again
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        keys = {c.key.value for c in table.ordered_columns}
        assert set(must) | set(minor) <= keys


async def test_at_80x24_the_disks_go_under_each_hosts_status_cut_in_the_middle():
    app = fixture_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        headers = {c.key.value: str(c.label) for c in table.ordered_columns}
        assert headers["status"] == "Status · disks", headers
        status = table.get_cell("ana-ml2", "status").plain.splitlines()
        # its state first, then one line a disk: how full, and the path's head and tail
        assert status[0].startswith("● up"), status
        assert [x.split("%")[0][-3:].strip() for x in status[1:]] == ["73", "91"], status
        assert status[1].endswith("tune") and "/t" in status[1] and "…" in status[1], status
        assert status[2].endswith("~/runs"), status
        # the row is as tall as what it holds; a down host says why, not its last disks
        down = table.get_cell("nh3-dev", "status").plain.splitlines()
        assert down[0].startswith("✖ DOWN") and not any("%" in x for x in down), down
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        headers = {c.key.value: str(c.label) for c in table.ordered_columns}
        assert headers["status"] == "Status" and headers["disks"] == "Disks"
        assert "%" not in table.get_cell("ana-ml2", "status").plain


async def test_at_80x24_the_runs_view_shows_every_host_and_run_name_whole():
    names = ["run-with-a-rather-long-name-7", "run-with-a-rather-long-name-8", "r1"]
    hosts = ["train-node-a-01", "train-node-a-02", "gx10"]
    fleet = parse_fleet("".join(f"[hosts.{h}]\nlocal = true\n" for h in hosts), "x")
    runs = {
        h: Run(host=h, path=f"/runs/{n}", name=n, state="running", step=3, max_steps=9)
        for h, n in zip(hosts, names, strict=True)
    }
    snap = FleetSnapshot(
        hosts=tuple(HostSnapshot(name=h, reachable=True, time=1.0, runs=(runs[h],)) for h in hosts),
        time=1.0,
    )
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        for h in hosts:
            key = runs[h].key
            name = table.get_cell(key, "name")
            host = table.get_cell(key, "host")
            name = name if isinstance(name, str) else name.plain
            host = host if isinstance(host, str) else host.plain
            # every character there, in lines that fit the column; the row as tall as they are
            assert name.replace("\n", "") == runs[h].name and host.replace("\n", "") == h
            lines = max(name.count("\n"), host.count("\n")) + 1
            assert table.rows[key].height == lines
            assert "…" not in name + host
        assert table.rows[runs["train-node-a-01"].key].height > 1
        assert table.rows[runs["gx10"].key].height == 1
        assert table.virtual_size.width <= table.size.width


def test_shortened_names_never_look_the_same():
    rng = random.Random(7)
    for _ in range(2000):
        names = {
            "".join(rng.choice("ab-1") for _ in range(rng.randint(1, 16)))
            for _ in range(rng.randint(1, 10))
        }
        width = rng.randint(2, 10)
        short = shorten_unique(names, width)
        assert len(set(short.values())) == len(names), (names, width, short)
        assert all(len(v) <= width for v in short.values())
        assert all(short[n] == n for n in names if len(n) <= width)
    assert shorten_unique(["gpu-node-017", "gpu-node-018"], 8) == {
        "gpu-node-017": "gpu-no…7",
        "gpu-node-018": "gpu-no…8",
    }


async def test_long_host_and_run_names_are_whole_in_the_fleet_table():
    names = ["train-node-a-01", "train-node-a-02", "train-node-b-01"]
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in names), "x")
    long_run = Run(
        host=names[0],
        path="/runs/lora-qwen3-1.7b-r32-seq4096",
        name="lora-qwen3-1.7b-r32-seq4096",
        state="running",
        step=40,
        max_steps=100,
    )
    stalled = Run(
        host=names[0],
        path="/runs/a-stalled-run-with-a-long-name",
        name="a-stalled-run-with-a-long-name",
        state="stalled",
        step=7,
        max_steps=100,
    )
    snap = FleetSnapshot(
        hosts=tuple(
            HostSnapshot(
                name=n, reachable=True, time=1.0, runs=(long_run, stalled) if n == names[0] else ()
            )
            for n in names
        ),
        time=1.0,
    )
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, 1)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        shown = [table.get_cell(n, "host").plain for n in names]
        # every host's name whole, wrapped in its column
        assert [s.replace("\n", "") for s in shown] == names, shown
        assert all(len(x) <= 8 for s in shown for x in s.splitlines()), shown
        runs = table.get_cell(names[0], "runs").plain
        flat = runs.replace("\n ", "")
        assert long_run.name in flat and stalled.name in flat and "…" not in runs, runs
        assert "40%" in runs and "stalled" in runs
        # the row as tall as its longest cell
        assert table.rows[names[0]].height == len(runs.splitlines()) > 2


async def test_failed_run_shows_why_and_no_raw_stderr(tmp_path):
    run = Run(
        host="local",
        path=str(tmp_path / "runs" / "r1"),
        name="r1",
        state="failed",
        reason="CUDA out of memory at step 40",
    )
    fleet = parse_fleet(f'[hosts.local]\nlocal = true\nruns = ["{tmp_path}/runs"]\n', "x")
    snap = FleetSnapshot(
        hosts=(HostSnapshot(name="local", reachable=True, time=1.0, runs=(run,)),), time=1.0
    )
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").render())
        assert "why failed: CUDA out of memory at step 40" in title
        log = "\n".join(app.screen.query_one("#run-log").lines)
        # the run's folder is not on the host: one plain sentence, never a tool's stderr
        assert (
            "is not on local now (moved or removed?)" in log
            and "tail:" not in log
            and "cannot open" not in log
        )


async def test_no_markdown_backticks_on_any_view():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        for view in ("1", "2", "3", "4", "question_mark"):
            await pilot.press(view)
            await pilot.pause()
            for w in app.screen.query("Static, Label"):
                r = w.render()
                assert "`" not in (r.plain if isinstance(r, Text) else str(r)), (view, w)
            if view == "question_mark":
                await pilot.press("escape")


async def test_runs_view_offers_resume_on_a_failed_run(tmp_path, monkeypatch):
    from fleetdeck.backend.actions.launch import main as backend_launch
    from fleetdeck.tui.modals.launch import LaunchModal

    asked = []

    async def fake_preflight(link, run, after=None, **kw):
        asked.append((link.host.name, run, after, kw))
        raise backend_launch.HostError(link.host.name, "stop here", "test")

    monkeypatch.setattr(backend_launch, "preflight", fake_preflight)
    failed = tmp_path / "runs" / "r1"
    failed.mkdir(parents=True)
    (failed / "RUN.toml").write_text(
        f'name = "r1"\nbase_model = "random:tiny"\noutput = "{failed}"\n'
    )
    from fleetdeck.backend.fleet.models import Checkpoint

    ckpt = Checkpoint(path=str(failed / "checkpoints" / "checkpoint-25"), step=25, bytes=1 << 20)
    runs = (
        Run(
            host="local",
            path=str(failed),
            name="r1",
            state="failed",
            reason="killed by SIGKILL",
            checkpoints=(ckpt,),
        ),
        Run(host="local", path=str(tmp_path / "runs" / "r0"), name="r0", state="finished"),
    )
    fleet = parse_fleet(f'[hosts.local]\nlocal = true\nruns = ["{tmp_path}/runs"]\n', "x")
    snap = FleetSnapshot(
        hosts=(HostSnapshot(name="local", reachable=True, time=1.0, runs=runs),), time=1.0
    )
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 1.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("2")  # the finished run, r0, is listed first: nothing to resume
        await pilot.press("r")
        await pilot.pause()
        assert any("only a failed" in n.message for n in app._notifications)
        await pilot.press("j", "r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, LaunchModal) and modal.resume.name == "r1"
        assert modal.values["output"] == str(failed)
        assert "Resume r1 on local" in str(modal.query_one(".title").render())
        assert modal.query_one("#launch-toml").disabled and app.focused.id == "launch-after"
        await pilot.press("enter")  # the pre-flight, with resume and the host's own RUN.toml values
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert asked == [("local", modal.values, None, {"resume": True})]


async def test_the_alerts_view_at_80x24_keeps_its_title_header_and_first_rows(monkeypatch):
    """Four silences and the seats panel below once squeezed the alert table to one line
    (its cursor out of sight) and scrolled the view's title away."""
    from fleetdeck.backend.monitor.rules import alerts
    from fleetdeck.backend.monitor.silences import add_silence

    monkeypatch.setattr(alerts, "LOOP_SETTLE_S", 0.0)  # the recorded strays fire at once
    for i in range(4):
        add_silence(host="gx10", rule=None, subject=f"x{i}", duration=3600, comment=f"why {i}")
    app = fixture_app()
    app.source.snapshots = [with_seats(s) for s in app.source.snapshots]
    app.alert_watch.enabled = True
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        app.clear_notifications()
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#alerts-table", KeyedTable)
        assert table.row_count >= 3
        title = app.screen.query_one("#alerts-title")
        for w in (title, table):
            r = w.region
            assert r.height and 0 < r.y and r.bottom <= 23, (w, r)
        assert table.region.height >= 1 + table.row_count  # the header and every row here
        assert app.screen.query_one("#silences-table", KeyedTable).region.height >= 2
