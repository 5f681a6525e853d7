"""Describe (`d`): the raw source behind a row, escaped, scrollable, copyable: a run's row,
run.json and newest trainer_state.json excerpt; a schedule's line with its file and number."""

from __future__ import annotations

import json

from textual.widgets import TextArea

from fleetdeck.tui.screens.describe import DescribeModal, schedule_sources


async def test_d_on_a_run_shows_its_run_json_and_newest_trainer_state_escaped(tmp_path):
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp

    root = tmp_path / "runs"
    run = root / "run-4"
    for step in (10, 20):
        ck = run / "checkpoints" / f"checkpoint-{step}"
        ck.mkdir(parents=True)
        history = [{"step": i, "loss": 3.0 - i / 100} for i in range(1, step + 1)]
        (ck / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 40,
                                                           "log_history": history}))
    (run / "run.json").write_bytes(b'{"name": "run-4", "note": "\x1b]52;c;SGVsbG8=\x07 evil", "seed": 4919}\n')
    fleet = parse_fleet(f'[hosts.here]\nlocal = true\nruns = ["{root}"]\npoll_interval = 30\n', "test")
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
    from fleetdeck.backend.fleet.models import Schedule
    from fleetdeck.backend.fleet.ssh import HostLink

    cron = tmp_path / "fleetdeck-test"
    cron.write_text("# a comment\nSHELL=/bin/sh\n37 * * * * ops /home/ops/bin/check-run.sh inform\n")
    fleet = parse_fleet('[hosts.here]\nlocal = true\n', "test")
    s = Schedule(id="cron-1", host="here", kind="cron-file", user="ops", spec="37 * * * *",
                 command="/home/ops/bin/check-run.sh inform", source=str(cron))
    async with HostLink(fleet.host("here")) as link:
        sections = await schedule_sources(link, s)
    assert sections[0] == (f"{cron}: the line", "3: 37 * * * * ops /home/ops/bin/check-run.sh inform")
    gone = Schedule(id="cron-2", host="here", kind="cron-file", user="ops", spec="", command="x",
                    source=str(tmp_path / "missing"))
    async with HostLink(fleet.host("here")) as link:
        sections = await schedule_sources(link, gone)
    assert "could not be read" in sections[0][1]
