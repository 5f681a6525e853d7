"""The Runs view's train.log pane: `/` search with `n` / `N`, `e` / `E` through the lines that
look like trouble (a Traceback, a nan, an error), `w` wraps; a poll keeps the reader's place."""

from __future__ import annotations

import json

from fleetdeck.tui.widgets.log_pane import LogPane


def _fleet(tmp_path, lines):
    from fleetdeck.backend.fleet.config import parse_fleet

    root = tmp_path / "runs"
    run = root / "run-1"
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text(
        json.dumps({"step": 1, "loss": 2.0, "max_steps": 10}) + "\n"
    )
    (run / "train.log").write_text("".join(line + "\n" for line in lines))
    return parse_fleet(
        f'[hosts.here]\nlocal = true\nruns = ["{root}"]\npoll_interval = 30\n', "test"
    )


LINES = [
    "step 1 loss 2.1",
    "step 2 loss 1.9",
    "Traceback (most recent call last):",
    '  File "train.py", line 3',
    "RuntimeError: CUDA error: out of memory",
    "step 3 loss nan",
    "x" * 300 + " the end of a long line",
    "step 4 loss 1.7 \x1b[31mred\x1b[0m",
]


async def _open_log(app, pilot) -> LogPane:
    for _ in range(150):
        await pilot.pause(0.1)
        if app.state.polls:
            break
    await pilot.press("2")
    pane = app.screen.query_one("#run-log", LogPane)
    for _ in range(150):
        await pilot.pause(0.1)
        if any("step 4" in line for line in pane.source):
            break
    assert any("step 4" in line for line in pane.source), pane.source
    pane.focus()
    await pilot.pause()
    return pane


def label(app) -> str:
    return str(app.screen.query_one("#run-log-label").render())


async def test_slash_searches_the_log_and_n_and_shift_n_walk_its_matches(tmp_path):
    from fleetdeck.tui.app import FleetdeckApp

    app = FleetdeckApp(_fleet(tmp_path, LINES))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = await _open_log(app, pilot)
        await pilot.press("slash", *"LOSS", "enter")
        await pilot.pause()
        assert pane.filter_text == "LOSS" and len(pane.matches) == 4
        assert [m[0] for m in pane.matches] == [0, 1, 5, 7]
        first = pane.current
        assert first is not None and "of 4" in label(app), label(app)
        await pilot.press("n")
        assert pane.current == (first + 1) % 4
        await pilot.press("N", "N")
        assert pane.current == (first - 1) % 4
        assert f"match {pane.current + 1} of 4" in label(app)
        # the escaped colour code is text, and searchable as text
        await pilot.press("slash", "ctrl+u", *"31mred", "enter")
        await pilot.pause()
        assert len(pane.matches) == 1 and pane.matches[0][0] == 7
        # a poll reads the same log again: the place stays
        at = pane.at_line
        app.screen._log_text = None
        app.screen.show_log("\n".join(pane.source))
        await pilot.pause()
        assert pane.at_line == at and len(pane.matches) == 1
        # no match says so
        await pilot.press("slash", "ctrl+u", *"zebra", "enter")
        await pilot.pause()
        assert not pane.matches and "no match in 8 lines" in label(app)
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert pane.filter_text == "" and not pane.matches


async def test_e_jumps_to_the_first_then_the_next_traceback_nan_or_error_and_w_wraps(tmp_path):
    from fleetdeck.tui.app import FleetdeckApp

    app = FleetdeckApp(_fleet(tmp_path, LINES))
    async with app.run_test(size=(100, 40)) as pilot:
        pane = await _open_log(app, pilot)
        seen = []
        for _ in range(4):
            await pilot.press("e")
            seen.append(pane.at_line)
        assert seen == [2, 4, 5, 2], seen  # Traceback, the error, the nan, round again
        assert "problem 1 of 3" in label(app)
        await pilot.press("E")
        assert pane.at_line == 5
        rows = len(pane.lines)
        assert rows == len(LINES)
        await pilot.press("w")
        await pilot.pause()
        assert pane.wrap and len(pane.lines) > rows  # the long line takes several rows
        assert max(len(line) for line in pane.lines) <= pane.size.width
        assert "wrapped" in label(app)
        await pilot.press("w")
        await pilot.pause()
        assert not pane.wrap and len(pane.lines) == rows
