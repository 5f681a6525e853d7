"""The Runs view's s/step is the median of the run's recent step times, not its last step's,
and its ETA is reckoned from the same figure; Describe says how."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from textual.widgets import TextArea

from fleetdeck.tui.modals.describe import DescribeModal

from support.recorded import cell_text


async def test_the_runs_view_shows_the_median_s_per_step_and_the_eta_from_it(tmp_path):
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp

    root = tmp_path / "runs"
    run = root / "run-7"
    run.mkdir(parents=True)
    now = time.time()
    lines = [
        {"step": s, "max_steps": 2000, "loss": 2.0, "seconds_per_step": 1.5, "time": now - 60 + s}
        for s in range(1, 40)
    ]
    # the last step took 40 s (a save): the old s/step said 40.00 and an ETA of 22 hours
    lines.append(
        {"step": 40, "max_steps": 2000, "loss": 2.0, "seconds_per_step": 40.0, "time": now}
    )
    (run / "progress.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    trainer = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", str(run)], cwd=run
    )
    fleet = parse_fleet(
        f'[hosts.here]\nlocal = true\nruns = ["{root}"]\npoll_interval = 30\n', "test"
    )
    app = FleetdeckApp(fleet)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(150):
                await pilot.pause(0.1)
                if app.state.polls and app.state.runs:
                    break
            await pilot.press("2")
            await pilot.pause(0.3)
            table = app.screen.table
            (key,) = table.keys
            assert cell_text(table, key, "state") == "running"
            assert cell_text(table, key, "sps") == "1.50"
            assert cell_text(table, key, "eta") == "49m00s"  # 1960 steps x 1.5 s (not 40 s: 21h46m)
            assert "1.50 s/step" in str(app.screen.query_one("#run-title").render())
            await pilot.press("d")
            await pilot.pause()
            assert isinstance(app.screen, DescribeModal)
            text = app.screen.query_one("#describe-body", TextArea).text
            assert (
                "median of the last 20 steps' times" in text and '"seconds_per_step": 1.5,' in text
            )
    finally:
        trainer.kill()
        trainer.wait()
