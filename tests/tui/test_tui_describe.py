"""Describe (`d`): the raw source behind a row, escaped, scrollable, copyable: a run's row,
run.json and newest trainer_state.json excerpt; a schedule's line with its file and number."""

from __future__ import annotations

import json

from textual.widgets import TextArea

from fleetdeck.tui.modals.describe import DescribeModal, schedule_sources


async def test_d_on_a_run_shows_its_run_json_and_newest_trainer_state_escaped(tmp_path):
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp

    root = tmp_path / "runs"
    run = root / "run-4"
    for step in (10, 20):
        ck = run / "checkpoints" / f"checkpoint-{step}"
        ck.mkdir(parents=True)
        history = [{"step": i, "loss": 3.0 - i / 100} for i in range(1, step + 1)]
        (ck / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "max_steps": 40, "log_history": history})
        )
    (run / "run.json").write_bytes(
        b'{"name": "run-4", "note": "\x1b]52;c;SGVsbG8=\x07 evil", "seed": 4919}\n'
    )
    fleet = parse_fleet(
        f'[hosts.here]\nlocal = true\nruns = ["{root}"]\npoll_interval = 30\n', "test"
    )
    app = FleetdeckApp(fleet)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(150):
            await pilot.pause(0.1)
            if app.state.polls and app.state.runs:
                break
        await pilot.press("2")
        await pilot.pause(0.3)
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, DescribeModal)
        body = app.screen.query_one("#describe-body", TextArea)
        for _ in range(100):
            await pilot.pause(0.1)
            if "reading…" not in body.text:
                break
        text = body.text
        assert '"seed": 4919' in text and "\\x1b]52;c;SGVsbG8=\\x07 evil" in text
        assert "\x1b" not in text and "\x07" not in text
        assert "checkpoint-20/trainer_state.json" in text and '"global_step": 20' in text
        assert "15 earlier entries" in text and '"step": 20' in text and '"step": 3,' not in text
        assert body.read_only
        await pilot.press("escape")
        assert not isinstance(app.screen, DescribeModal)


async def test_a_cron_files_line_is_found_with_its_number(tmp_path):
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.link.ssh import HostLink
    from fleetdeck.backend.fleet.models import Schedule

    cron = tmp_path / "fleetdeck-test"
    cron.write_text(
        "# a comment\nSHELL=/bin/sh\n37 * * * * ops /home/ops/bin/check-run.sh inform\n"
    )
    fleet = parse_fleet("[hosts.here]\nlocal = true\n", "test")
    s = Schedule(
        id="cron-1",
        host="here",
        kind="cron-file",
        user="ops",
        spec="37 * * * *",
        command="/home/ops/bin/check-run.sh inform",
        source=str(cron),
    )
    async with HostLink(fleet.host("here")) as link:
        sections = await schedule_sources(link, s)
    assert sections[0] == (
        f"{cron}: the line",
        "3: 37 * * * * ops /home/ops/bin/check-run.sh inform",
    )
    gone = Schedule(
        id="cron-2",
        host="here",
        kind="cron-file",
        user="ops",
        spec="",
        command="x",
        source=str(tmp_path / "missing"),
    )
    async with HostLink(fleet.host("here")) as link:
        sections = await schedule_sources(link, gone)
    assert "could not be read" in sections[0][1]


async def test_d_on_a_seat_shows_its_whole_command_line_flags_endpoint_and_last_check_escaped():
    """A serving seat's Describe: the row's command line (the probe keeps 300 characters) and
    the whole one read from the process, the memory flags, the endpoint, the last check."""
    import subprocess
    import sys
    import time

    from fleetdeck.backend.fleet.seat_model import Seat
    from fleetdeck.backend.monitor.seats import SeatCheck, record_check

    from support.seat_polls import _host, _seats_app

    long_arg = "x" * 400
    argv = [
        sys.executable,
        "-c",
        "import time; time.sleep(120)",
        "--gpu-memory-utilization",
        "0.85",
        "--served-model-name",
        "m\x1b]52;c;SGVsbG8=\x07",
        long_arg,
        "--end-mark",
    ]
    proc = subprocess.Popen(argv)
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        seat = Seat(
            host="local",
            kind="vllm",
            port=8123,
            model="m\x1b[31m",
            pid=proc.pid,
            start_ticks=ticks,
            pids=(proc.pid,),
            flags={"--gpu-memory-utilization": "0.85", "--max-model-len": "4096\x1b[2J"},
            command=" ".join(argv)[:300],
        )
        record_check(
            SeatCheck(
                host="local",
                port=8123,
                sound=False,
                signature="nonfinite-logprobs",
                message="logprob of token 3 is nan \x1b[2J",
                endpoint="http://127.0.0.1:8123/v1",
                requests=2,
                completion_tokens=8,
                logprobs=7,
                seconds=0.5,
                checked_at=time.time(),
            )
        )
        app = _seats_app([_host("local", (), (seat,))])
        async with app.run_test(size=(120, 40)) as pilot:
            from support.recorded import feed

            await feed(app, pilot, 1)
            await pilot.press("5")
            await pilot.pause()
            app.screen.query_one("#seats-table").focus()
            await pilot.press("d")
            await pilot.pause()
            assert isinstance(app.screen, DescribeModal)
            body = app.screen.query_one("#describe-body", TextArea)
            for _ in range(100):
                await pilot.pause(0.1)
                if "reading…" not in body.text:
                    break
            text = body.text
            assert "\x1b" not in text and "\x07" not in text
            # the whole command line, from the process: the long argument whole, one a line
            assert f"\n{long_arg}\n--end-mark" in text and "m\\x1b]52;c;SGVsbG8=\\x07" in text
            assert (
                "--gpu-memory-utilization 0.85" in text and "--max-model-len 4096\\x1b[2J" in text
            )
            assert "http://127.0.0.1:8123 (asked from local itself" in text
            assert (
                "FAILED nonfinite-logprobs" in text and "logprob of token 3 is nan \\x1b[2J" in text
            )
            assert (
                "endpoint: http://127.0.0.1:8123/v1" in text
                and "8 tokens, 7 logprobs finite" in text
            )
            assert body.read_only
            await pilot.press("escape")
            assert not isinstance(app.screen, DescribeModal)
    finally:
        proc.kill()
        proc.wait()


async def test_d_in_the_host_view_describes_a_process_with_its_whole_command_line(children):
    """`d` on a row of the Host view's processes: its row as the probe saw it, then its whole
    command line read from /proc on the host while the pid is still that process."""
    import subprocess
    import sys

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Process
    from fleetdeck.backend.host.lib import procfs
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.messages import FleetPolled
    from fleetdeck.tui.modals.describe import DescribeModal
    from fleetdeck.tui.sources import RecordedSource
    from fleetdeck.tui.widgets.keyed_table import KeyedTable

    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; print('ok', flush=True); time.sleep(600)",
            "--flag",
            "a b\x1b[2J",
        ],
        stdout=subprocess.PIPE,
    )
    children.append(p)
    assert p.stdout.readline() == b"ok\n"
    proc = Process(
        pid=p.pid,
        start=procfs.start_ticks(p.pid),
        user="ops",
        command="python -c ...",
        cpu_pct=1.0,
        why=("cpu",),
    )
    gone = Process(
        pid=p.pid,
        start=(proc.start or 0) + 1,
        user="ops",
        command="python",
        cpu_pct=0.5,
        why=("cpu",),
    )
    fleet = parse_fleet(f'[hosts.h1]\nlocal = true\npython = "{sys.executable}"\n', "fixture")
    snap = FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=1.0, processes=(proc,)),), time=1.0
    )
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(FleetPolled(snap))
        await pilot.pause()
        app.open_host("h1")
        await pilot.pause()
        app.screen.query_one("#host-procs", KeyedTable).focus()
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, DescribeModal)
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = app.screen.text()
        assert f'"pid": {p.pid}' in text and "--flag\na b\\x1b[2J" in text and "\x1b" not in text
        await pilot.press("escape")
        await pilot.pause()
        # a pid whose start time is another's: not read
        snap2 = FleetSnapshot(
            hosts=(HostSnapshot(name="h1", reachable=True, time=3.0, processes=(gone,)),), time=3.0
        )
        app.post_message(FleetPolled(snap2))
        await pilot.pause()
        table = app.screen.query_one("#host-procs", KeyedTable)
        table.focus()
        table.move_cursor(row=table.get_row_index(f"{gone.pid}:{gone.start}"))
        await pilot.press("d")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "is not that process now" in app.screen.text() and "--flag" not in app.screen.text()
