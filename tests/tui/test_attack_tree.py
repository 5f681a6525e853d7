"""The Host view's process tree, attacked: a host that says its 40 processes are one chain of
parents (a hostile answer, or a deep launcher) must not push the commands off an 80-column
screen; each command stays whole after at most MAX_DRAWN levels of glyphs."""

from __future__ import annotations

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Process
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable


def _chain(n: int) -> list[Process]:
    return [
        Process(
            pid=1000 + i,
            start=i + 1,
            user="ops",
            command=f"level-{i}",
            cpu_pct=float(n - i),
            why=("cpu",),
            ppid=(1000 + i - 1) if i else 1,
        )
        for i in range(n)
    ]


def test_a_chain_of_100_parents_draws_bounded_glyphs_and_every_process_once():
    from fleetdeck.tui.views.proc_tree import MAX_DRAWN, tree_order

    got = tree_order(_chain(100))
    assert [p.pid for p, _ in got] == [1000 + i for i in range(100)]
    assert max(len(g) for _, g in got) <= 3 * MAX_DRAWN + 2
    assert got[MAX_DRAWN][1] == "   " * (MAX_DRAWN - 1) + "└─ "  # shallow levels drawn whole
    assert got[99][1] == "… " + "   " * (MAX_DRAWN - 1) + "└─ "


async def test_40_processes_in_one_chain_keep_their_commands_on_an_80_column_screen():
    snap = FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=1.0, processes=tuple(_chain(40))),),
        time=1.0,
    )
    fleet = parse_fleet("[hosts.h1]\nlocal = true\n", "fixture")
    app = FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 2.0)
    async with app.run_test(size=(80, 30)) as pilot:
        app.post_message(FleetPolled(snap))
        await pilot.pause()
        app.open_host("h1")
        await pilot.pause()
        table = app.screen.query_one("#host-procs", KeyedTable)
        table.focus()
        await pilot.press("e")
        await pilot.pause()
        cells = [table.get_cell(k, "cmd").plain for k in table.keys]
        assert len(cells) == 40 and cells[39].endswith("level-39")
        assert all(len(c) - len(c.lstrip("│├└─… ")) <= 26 for c in cells), max(cells, key=len)
