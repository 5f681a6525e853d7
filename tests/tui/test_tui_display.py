"""What the dashboard prints for names and records: one escaper (`shown`) for every path, id
and command, the audit log read as text, and a cursor row that needs no colour to be seen."""

from __future__ import annotations

import dataclasses

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import app_over, feed, plain, recorded

BACKSLASH_N = "run-a\\nb"  # a name holding a backslash and an n
NEWLINE = "run-a\nb"  # a name holding a newline


def twin_fleet() -> FleetSnapshot:
    """The recorded fleet with gx10's two runs renamed to the two look-alike names, and one of
    its schedules given a command holding a newline."""
    snap = recorded("fleet.json")
    hosts = []
    for h in snap.hosts:
        if h.name == "gx10":
            runs = tuple(
                dataclasses.replace(r, name=n, path=f"/home/ops/runs/{n}")
                for r, n in zip(h.runs, (BACKSLASH_N, NEWLINE), strict=True)
            )
            scheds = (
                dataclasses.replace(h.schedules[0], command="echo a\\nb\necho c"),
                *h.schedules[1:],
            )
            h = dataclasses.replace(h, runs=runs, schedules=scheds)
        hosts.append(h)
    return dataclasses.replace(snap, hosts=tuple(hosts))


async def test_backslash_n_and_newline_names_look_different():
    app = app_over(twin_fleet())
    async with app.run_test(size=(160, 50)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        names = {k: plain(table.get_cell(k, "name")) for k in table.keys}
        lit = names["gx10:/home/ops/runs/" + BACKSLASH_N]
        nl = names["gx10:/home/ops/runs/" + NEWLINE]
        assert lit == "run-a\\\\nb"  # the backslash doubled
        assert nl == "run-a\\nb"  # the newline as an escape, on one line
        assert lit != nl and "\n" not in nl
        # the detail pane's path: the highlighted run's, escaped the same way
        table.move_cursor(row=table.get_row_index("gx10:/home/ops/runs/" + NEWLINE))
        await pilot.pause()
        title = app.screen.query_one("#run-title").render()
        assert "gx10:/home/ops/runs/run-a\\nb" in plain(title).splitlines()[0]

        await pilot.press("3")
        await pilot.pause()
        sched = app.screen.query_one("#sched-table", KeyedTable)
        cmds = [plain(sched.get_cell(k, "cmd")) for k in sched.keys]
        assert "echo a\\\\nb\\necho c" in cmds


async def test_audit_view_reads_records_as_text_not_json():
    audit.audit(
        "purge",
        "gx10",
        "refused",
        paths=[
            {
                "path": "/home/ops/runs/r\n1/checkpoints/checkpoint-25",
                "bytes": 2048,
                "deleted": False,
                "refusals": [{"code": "in-use", "message": "pid 4242 has its cwd there"}],
            }
        ],
        keepers=[],
        free_bytes_before=4096,
        free_bytes_after=4096,
        expected_bytes=2048,
    )
    audit.audit(
        "schedule-remove",
        "ana-ml2",
        "done",
        schedule={"kind": "loop", "id": "loop-9c1e55aa", "command": "bash -c 'sleep 5'"},
        reason_code=None,
        message="stopped pid 77",
    )
    app = app_over(recorded("fleet.json"))
    async with app.run_test(size=(160, 50)) as pilot:
        await feed(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        table = app.screen.query_one("#audit-table", KeyedTable)
        keys = list(table.keys)
        details = [plain(table.get_cell(k, "what")) for k in keys]
        assert details[0].startswith("loop loop-9c1e55aa")  # newest first
        assert "r\\n1/checkpoints/checkpoint-25" in details[1] and "refused: in-use" in details[1]
        for d in details:
            assert "{" not in d and '"' not in d  # no JSON
        table.move_cursor(row=1)
        await pilot.pause()
        text = plain(app.screen.query_one("#audit-detail").render())
        assert "purge on gx10: refused" in text
        assert "in-use: pid 4242 has its cwd there" in text
        assert "2.0K" in text  # sizes through the dashboard's size_short
        assert "{" not in text and "\n1/" not in text


@pytest.mark.parametrize("no_color", [True, False])
async def test_cursor_row_visible_without_colour(monkeypatch, no_color):
    """With NO_COLOR the focused table's cursor row is in reverse video (a blurred one is
    underlined); with colour the theme's cursor background does the job and nothing changes."""
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    app = app_over(recorded("fleet.json"))
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        assert app.no_color is no_color
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.has_focus

        def reversed_lines() -> list[int]:
            # the whole line, from its first cell on (a STALE badge alone is reverse too)
            return [
                y
                for y in range(table.size.height)
                if (segs := list(table.render_line(y))) and segs[0].style and segs[0].style.reverse
            ]

        assert reversed_lines() == ([1] if no_color else [])  # line 0 is the header
        await pilot.press("j")
        await pilot.pause()
        row = table.cursor_row
        if no_color:
            # gx10 is one line high, so the second host starts on line 2
            assert row == 1 and reversed_lines()[0] == 2
        table.blur()
        await pilot.pause()
        assert reversed_lines() == []
        style = table.get_component_styles("datatable--cursor").text_style
        assert bool(style.underline) is no_color
