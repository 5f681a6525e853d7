"""A checkpoint the host found incomplete (a save killed half-way) is marked in the Runs view's
Checkpoints panel with what it lacks, and resume names the newest complete one: the probe's
`complete` / `problem` reach the screen through the boundary, escaped."""

from __future__ import annotations

import json

from fleetdeck.backend.fleet.validate import fleet_from_json
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import FIXTURES, app_over, feed, plain

RUN7 = "gx10:/home/ops/runs/run-7"


def _fleet(newest: dict, state: str = "failed"):
    d = json.loads((FIXTURES / "fleet.json").read_text())
    for h in d["hosts"]:
        for r in h.get("runs") or []:
            if r["name"] == "run-7":
                r["state"], r["reason"] = state, "the trainer exited 1"
                for c in r["checkpoints"]:
                    c.update(complete=True, problem=None)
                r["checkpoints"][-1].update(newest)
    return fleet_from_json(d)


async def _shown(snap):
    app = app_over(snap)
    async with app.run_test(size=(160, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        runs = app.screen.query_one("#runs-table", KeyedTable)
        runs.move_cursor(row=runs.get_row_index(RUN7))
        await pilot.pause()
        ck = app.screen.query_one("#ckpt-table", KeyedTable)
        cells = {k.rsplit("/", 1)[-1]: plain(ck.get_cell(k, "path")) for k in ck.keys}
        return cells, plain(app.screen.query_one("#run-title").render())


async def test_an_incomplete_newest_checkpoint_is_marked_and_resume_names_the_one_before():
    cells, title = await _shown(
        _fleet(
            {"complete": False, "problem": "no adapter weights (adapter_model.safetensors)\x1b[2J"}
        )
    )
    assert "incomplete: no adapter weights (adapter_model.safetensors)" in cells["checkpoint-125"]
    assert "\x1b" not in cells["checkpoint-125"] and "\\x1b" in cells["checkpoint-125"]
    assert all("incomplete" not in v for k, v in cells.items() if k != "checkpoint-125")
    assert "r: resume from checkpoint-100 (the newest complete one)" in title


async def test_a_hostile_complete_field_is_dropped_not_the_checkpoint():
    cells, title = await _shown(_fleet({"complete": "yes", "problem": 42}))
    assert len(cells) == 5 and "incomplete" not in cells["checkpoint-125"]
    assert "r: resume from checkpoint-125" in title and "newest complete" not in title
