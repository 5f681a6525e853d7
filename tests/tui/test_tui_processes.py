"""The Host view's process table under the cursor: the row the operator highlighted is the row
the Stop pop-up names, whatever the probe's order did between two polls."""

from __future__ import annotations

import dataclasses

import pytest
from textual.widgets import Label

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Process
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.modals.stop import StopProcessModal
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

HOG = Process(
    pid=4100,
    start=10,
    user="ops",
    command="python hog.py",
    cpu_pct=90.0,
    rss_bytes=900 << 20,
    why=("cpu", "memory"),
)
PYTEST = Process(
    pid=4678,
    start=20,
    user="someone",
    command="python -m pytest",
    cpu_pct=40.0,
    rss_bytes=100 << 20,
    why=("cpu",),
)
SHELL = Process(
    pid=4000, start=5, user="ops", command="bash", cpu_pct=1.0, rss_bytes=10 << 20, why=("memory",)
)


def _snap(*procs: Process, t: float = 1.0) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=t, processes=procs),), time=t
    )


def _app() -> FleetdeckApp:
    fleet = parse_fleet("[hosts.h1]\nlocal = true\n", "fixture")
    return FleetdeckApp(fleet, RecordedSource([_snap()]), autopoll=False, clock=lambda: 2.0)


async def _host_view(app, pilot, snap):
    app.post_message(FleetPolled(snap))
    await pilot.pause()
    app.open_host("h1")
    await pilot.pause()
    table = app.screen.query_one("#host-procs", KeyedTable)
    table.focus()
    await pilot.pause()
    return table


async def _poll(app, pilot, snap):
    app.post_message(FleetPolled(snap))
    await pilot.pause()
    await pilot.pause()


async def _stop_names(app, pilot) -> str:
    await pilot.press("K")
    await pilot.pause()
    assert isinstance(app.screen, StopProcessModal)
    return str(app.screen.query_one(".title", Label).render())


TOPPER = Process(pid=3900, start=4, user="ops", command="make -j", cpu_pct=99.0, why=("cpu",))


@pytest.mark.parametrize("churn", [(), (TOPPER,)], ids=["swap", "swap-and-a-row-above-leaves"])
async def test_two_processes_swap_cpu_order_and_the_stop_pop_up_names_the_highlighted_one(churn):
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _host_view(app, pilot, _snap(*churn, PYTEST, HOG, SHELL))
        for _ in churn:
            await pilot.press("j")
        await pilot.press("j")
        assert table.current_key == "4100:10"  # the operator is on the 900 MB hog
        # the next poll: pytest now uses more CPU than the hog; the probe lists it first
        await _poll(
            app,
            pilot,
            _snap(
                dataclasses.replace(HOG, cpu_pct=95.0),
                dataclasses.replace(PYTEST, cpu_pct=5.0),
                SHELL,
                t=2.0,
            ),
        )
        assert table.keys[:2] == ["4100:10", "4678:20"]
        assert table.current_key == "4100:10"  # the cursor stayed on the hog
        assert await _stop_names(app, pilot) == "Stop process 4100 on h1"
        assert app.screen.process.command == "python hog.py"


async def test_the_cursor_follows_its_pid_when_a_row_above_it_goes_and_another_comes():
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _host_view(app, pilot, _snap(HOG, PYTEST, SHELL))
        await pilot.press("j")
        assert table.current_key == "4678:20"  # the operator moved to pytest
        # the hog above it ended and a newcomer took the top: the rows under the cursor moved
        new = Process(
            pid=5000, start=30, user="ops", command="python new.py", cpu_pct=99.0, why=("cpu",)
        )
        await _poll(app, pilot, _snap(new, SHELL, PYTEST, t=2.0))
        assert table.current_key == "4678:20"
        assert await _stop_names(app, pilot) == "Stop process 4678 on h1"


async def test_the_row_under_the_cursor_stays_when_its_process_leaves_the_listing_until_the_cursor_leaves():
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _host_view(app, pilot, _snap(HOG, PYTEST, SHELL))
        await pilot.press("j")
        assert table.current_key == "4678:20"
        # pytest ended and its pid came back as another process (another start time), listed
        # first; the hog fell out of the listing
        reused = dataclasses.replace(
            PYTEST, start=99, command="python evil.py", user="ops", cpu_pct=99.0
        )
        await _poll(app, pilot, _snap(reused, SHELL, t=2.0))
        assert table.keys == ["4678:99", "4678:20", "4000:5"]
        assert table.current_key == "4678:20"  # held in place, never the pid's new owner
        assert table.get_cell("4678:20", "why").plain == "not listed now"
        assert await _stop_names(app, pilot) == "Stop process 4678 on h1"
        assert app.screen.process.start == 20 and app.screen.process.command == "python -m pytest"
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("j")  # the operator moves on: the held row goes
        assert table.current_key == "4000:5"
        await _poll(app, pilot, _snap(reused, SHELL, t=3.0))
        assert table.keys == ["4678:99", "4000:5"] and table.current_key == "4000:5"


async def test_w_asks_the_host_who_holds_the_highlighted_runs_folder_and_shows_it_escaped(
    tmp_path, children
):
    """A real process holding a file with a hostile name under a run folder; the `local` host's
    helper answers; the pop-up starts at the highlighted run's folder."""
    import subprocess
    import sys
    import time

    from textual.widgets import Input, Static

    from fleetdeck.backend.fleet.models import Run
    from fleetdeck.tui.modals.holders import HoldersModal

    run = tmp_path / "run-5"
    run.mkdir()
    (run / "ckpt\x1b[2J\nx").write_bytes(b"x")
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nf = open(sys.argv[1])\nprint('ok', flush=True)\ntime.sleep(600)",
            str(run / "ckpt\x1b[2J\nx"),
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    children.append(p)
    assert p.stdout.readline() == b"ok\n"
    fleet = parse_fleet(f'[hosts.h1]\nlocal = true\npython = "{sys.executable}"\n', "fixture")
    r = Run(host="h1", path=str(run), name="run-5", state="running")
    snap = FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=1.0, runs=(r,)),), time=1.0
    )
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(FleetPolled(snap))
        await pilot.pause()
        app.open_host("h1")
        await pilot.pause()
        app.screen.query_one("#host-runs", KeyedTable).focus()
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, HoldersModal)
        assert app.screen.query_one("#holders-path", Input).value == str(run)
        await pilot.press("enter")
        deadline = time.monotonic() + 120
        while app.screen.report is None and time.monotonic() < deadline:
            await app.workers.wait_for_complete()
            await pilot.pause(0.05)
        table = app.screen.query_one("#holders-table", KeyedTable)
        key = next(k for k in table.keys if k.startswith(f"{p.pid}:"))
        assert table.get_cell(key, "file").plain == str(run) + "/ckpt\\x1b[2J\\nx"
        assert table.get_cell(key, "how").plain == "fd"
        said = str(app.screen.query_one("#holders-summary", Static).render())
        assert f"a file under {run}" in said and "processes read" in said
        # a path that is not there: said, nothing listed
        field = app.screen.query_one("#holders-path", Input)
        field.value = str(tmp_path / "absent")
        field.focus()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.report is None and table.keys == []
        assert "(not-found)" in str(app.screen.query_one("#holders-summary", Static).render())
        # asked as typed: `run-5 ` (a trailing space) is another folder, here one that is not there
        field.value = str(run) + " "
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.report is None and table.keys == []
        assert "(not-found)" in str(app.screen.query_one("#holders-summary", Static).render())


def _with_parent(p: Process, ppid: int | None) -> Process:
    """`p` as the probe lists it, with its parent pid."""
    return dataclasses.replace(p, ppid=ppid)


async def test_e_shows_a_trainers_workers_under_it_and_the_cursor_stays_on_its_process():
    trainer = _with_parent(
        Process(
            pid=700,
            start=1,
            user="ops",
            command="python train.py",
            cpu_pct=50.0,
            why=("gpu", "run"),
        ),
        1,
    )
    w1 = _with_parent(
        Process(
            pid=701, start=2, user="ops", command="python -c worker", cpu_pct=90.0, why=("run",)
        ),
        700,
    )
    w2 = _with_parent(
        Process(
            pid=702,
            start=3,
            user="ops",
            command="python -c $(rm -rf ~)\x1b[2J\nw",
            cpu_pct=1.0,
            why=("run",),
        ),
        700,
    )
    other = _with_parent(
        Process(pid=800, start=4, user="x", command="make", cpu_pct=95.0, why=("cpu",)), 1
    )
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _host_view(app, pilot, _snap(other, w1, trainer, w2))
        await pilot.press("j")
        assert table.current_key == "701:2"
        await pilot.press("e")
        await pilot.pause()
        assert table.keys == ["800:4", "700:1", "701:2", "702:3"]
        assert [table.get_cell(k, "cmd").plain for k in table.keys] == [
            "make",
            "python train.py",
            "├─ python -c worker",
            "└─ python -c $(rm -rf ~)\\x1b[2J\\nw",
        ]
        assert table.current_key == "701:2"  # the cursor moved with its process
        # a poll that changes the probe's order keeps the tree and the cursor
        await _poll(app, pilot, _snap(w2, trainer, other, w1, t=2.0))
        assert table.keys == ["700:1", "702:3", "701:2", "800:4"] and table.current_key == "701:2"
        assert await _stop_names(app, pilot) == "Stop process 701 on h1"
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("e")  # back to the probe's order
        await pilot.pause()
        assert table.keys == ["702:3", "700:1", "800:4", "701:2"] and table.current_key == "701:2"
        assert table.get_cell("701:2", "cmd").plain == "python -c worker"


def test_the_tree_keeps_every_process_once_when_a_host_says_parents_loop():
    from fleetdeck.tui.views.proc_tree import tree_order

    a = _with_parent(Process(pid=20, start=1, user="u", command="a"), 21)
    b = _with_parent(Process(pid=21, start=1, user="u", command="b"), 20)
    c = _with_parent(Process(pid=22, start=1, user="u", command="c"), 22)  # its own parent
    d = _with_parent(Process(pid=23, start=1, user="u", command="d"), None)
    got = tree_order([a, b, c, d])
    assert [(p.pid, g) for p, g in got] == [(22, ""), (23, ""), (20, ""), (21, "└─ ")]


async def test_a_processes_gpu_memory_is_shown_beside_its_cpu_and_rss():
    holder = Process(
        pid=900,
        start=9,
        user="ops",
        command="python serve.py",
        cpu_pct=12.0,
        rss_bytes=3 << 30,
        gpu_mib=20_480.0,
        why=("gpu",),
    )
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _host_view(app, pilot, _snap(holder, SHELL))
        cells = [table.get_cell("900:9", c) for c in ("cpu", "rss", "gpu")]
        assert [c.plain if hasattr(c, "plain") else str(c) for c in cells] == [
            "12%",
            "3.0G",
            "20,480 MiB",
        ]
        assert [str(c.label) for c in table.ordered_columns][2:5] == ["CPU", "RSS", "GPU"]
        assert str(table.get_cell("4000:5", "gpu")) == ""  # no GPU memory: blank, not 0
