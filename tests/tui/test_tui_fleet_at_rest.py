"""The Fleet view at rest: a poll that changed nothing on a row makes none of its cells and draws
none of its lines; a row whose cells changed is drawn again alone; the clock's tick makes the
ages of the rows on screen only, at most once a second. Counted through the real app, never
timed (the figures: benchmarks/tui_rest.py)."""

from __future__ import annotations

from dataclasses import replace

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.fleet_state import HISTORY
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.rows import fleet as rows
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable
from fleetdeck.tui.widgets.table_lines import TableLines

from support.at_rest import polled_host
from support.counting import Counter


class Clock:
    """The dashboard's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(name: str, now: float, latency: float = 20.0, used: float = 1000.0) -> HostSnapshot:
    """One host as a poll brings it: new objects each time, two GPUs, a disk, a finished run."""
    return polled_host(name, now, latency, used)


def app_of(names: list[str], clock: Clock) -> FleetdeckApp:
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in names), "x")
    first = FleetSnapshot(hosts=tuple(host(n, clock.now) for n in names), time=clock.now)
    return FleetdeckApp(fleet, RecordedSource([first]), autopoll=False, clock=clock)


class Made:
    """The Fleet rows' costly cells made, and the table's rows drawn, since the last take."""

    def __init__(self, monkeypatch) -> None:
        self.counters = {
            "gpus": Counter(monkeypatch, rows, "gpu_lines"),
            "disks": Counter(monkeypatch, rows, "disk_lines"),
            "runs": Counter(monkeypatch, rows, "run_lines"),
            "down": Counter(monkeypatch, rows, "down_words"),
            "rows drawn": Counter(monkeypatch, TableLines, "_render_row_lines"),
        }

    def take(self) -> dict[str, int]:
        return {k: c.take() for k, c in self.counters.items()}


NONE = {"gpus": 0, "disks": 0, "runs": 0, "down": 0, "rows drawn": 0}


async def test_a_poll_that_changed_nothing_on_a_row_makes_and_draws_none_of_it(monkeypatch):
    """Four hosts polled every second, new snapshot objects each time: once the sparklines are
    full of the same figure, a poll whose figures equal the ones before makes no cell and draws
    no line (before: every row on screen made again at each poll); one host's latency moved
    draws that row alone, its costly cells kept; one host's GPU memory moved makes its GPU
    cell alone (before: every row drawn again once anything changed)."""
    names = ["a", "b", "c", "d"]
    clock = Clock()
    app = app_of(names, clock)
    made = Made(monkeypatch)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one("#fleet-table", KeyedTable)

        async def poll(**moved: dict) -> None:
            clock.now += 1
            hosts = tuple(host(n, clock.now, **moved.get(n, {})) for n in names)
            app.post_message(FleetPolled(FleetSnapshot(hosts=hosts, time=clock.now)))
            await pilot.pause()
            await pilot.pause()

        for _ in range(HISTORY + 2):
            await poll()
        made.take()
        count = table._update_count
        for _ in range(5):
            await poll()
            assert made.take() == NONE, "a poll that changed nothing made or drew a row"
        assert table._update_count == count
        await poll(b={"latency": 77.0})
        assert table.get_cell("b", "lat").plain == "77ms"
        assert made.take() == {**NONE, "rows drawn": 1}, "a latency drew more than its row"
        await poll(b={"latency": 77.0}, c={"used": 40960.0})
        assert "40/80G" in table.get_cell("c", "gpus").plain
        assert made.take() == {**NONE, "gpus": 1, "rows drawn": 1}
        # and the screen shows both (the lines drawn alone, the others kept)
        screen = app.export_screenshot()
        assert "77ms" in screen and "40/80G" in screen and screen.count("20ms") == 3
        assert table._update_count == count, "a changed cell drew the whole table"


async def test_the_clock_makes_the_ages_on_screen_once_a_second(monkeypatch):
    """Forty hosts, two lines each (more than the screen shows), every fourth one down: the
    clock's tick makes the status of the down hosts on screen only, draws their rows only, and
    makes nothing else (before: every row on screen made again at each tick); a second tick in
    the same second makes nothing."""
    names = [f"h{i:02d}" for i in range(40)]
    down = set(names[::4])
    clock = Clock()
    app = app_of(names, clock)
    made = Made(monkeypatch)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one("#fleet-table", KeyedTable)
        for _ in range(3):
            clock.now += 1
            hosts = tuple(
                replace(host(n, clock.now), reachable=False, error="timed out")
                if n in down
                else host(n, clock.now)
                for n in names
            )
            app.post_message(FleetPolled(FleetSnapshot(hosts=hosts, time=clock.now)))
            await pilot.pause()
        await pilot.press("down")  # the line under the table on an up host (no age in it)
        for _ in range(5):  # the first frames drawn
            await pilot.pause()
        on_screen = table.keys_on_screen()
        down_shown = [n for n in on_screen if n in down]
        assert 0 < len(down_shown) < len(down) and len(on_screen) < len(names)
        before = table.get_cell(down_shown[0], "status").plain
        made.take()
        clock.now += 1.2  # within the poll interval's doubling: the up hosts are not stale
        app.refresh_views(tick=True)
        await pilot.pause()
        await pilot.pause()
        assert table.get_cell(down_shown[0], "status").plain != before
        assert table.current_key == "h01" and "h01" not in down
        assert made.take() == {**NONE, "down": len(down_shown), "rows drawn": len(down_shown)}
        clock.now += 0.1  # the same whole second
        app.refresh_views(tick=True)
        await pilot.pause()
        assert made.take() == NONE, "a tick in the same second made or drew a row"
