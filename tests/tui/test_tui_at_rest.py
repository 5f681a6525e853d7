"""The dashboard at rest: polls that bring the same fleet, only its latencies and times moved,
leave what the app holds flat, and the figures that move with the clock are redrawn at most
once a second and only on the view on screen. Counted, never timed (the figures:
benchmarks/tui_rest.py)."""

from __future__ import annotations

import gc

from textual.widgets import Static

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.tui import navigation
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.fleet_state import HISTORY
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.rows.fleet_cells import HostCells
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views import host as host_screen
from fleetdeck.tui.views.fleet import FleetScreen
from fleetdeck.tui.views.host import HostScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.at_rest import polled_host
from support.counting import Counter

HOSTS = ("a", "b", "c", "d")
#: polls before a count: the GPU sparklines (a character a poll) are full of the same figure
WARM = HISTORY


class Clock:
    """The dashboard's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def snap(now: float, i: int) -> FleetSnapshot:
    """The same four hosts, each poll new objects, as a poller's are: only the latency (a
    different one at each poll) and the time move."""
    hosts = tuple(polled_host(name, now, 5.0 + (i * 7 + k) % 60) for k, name in enumerate(HOSTS))
    return FleetSnapshot(hosts=hosts, time=now)


def app_of(clock: Clock) -> FleetdeckApp:
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in HOSTS), "x")
    return FleetdeckApp(fleet, RecordedSource([snap(clock.now, 0)]), autopoll=False, clock=clock)


def cache_entries(app: FleetdeckApp) -> dict[str, int]:
    """Every render cache of every table on screen, by name: its entries."""
    out = {}
    for table in app.screen.query(KeyedTable):
        for name in ("_cell_render_cache", "_row_render_cache", "_line_cache"):
            out[f"{table.id}.{name}"] = len(getattr(table, name))
        out[f"{table.id}.cells"] = len(table._lines.content_cache)
        out[f"{table.id}.row lines"] = len(table._lines.row_lines_cache)
    return out


async def test_polls_of_an_unchanged_fleet_leave_what_the_dashboard_holds_flat():
    """A poll every half second, each a new snapshot whose latencies moved: the tables' render
    caches held a frame's worth of dead entries per poll until their LRU bounds (a megabyte a
    minute at rest); now each holds what the frame on screen needs, and the objects the app
    keeps do not grow with the polls."""
    clock = Clock()
    app = app_of(clock)
    async with app.run_test(size=(160, 48)) as pilot:

        async def polls(n: int) -> None:
            for i in range(n):
                clock.now += 0.5
                app.post_message(FleetPolled(snap(clock.now, i)))
                await pilot.pause()

        await polls(40)  # past the first frames
        for _ in range(200):  # and the views built ahead (one step every AHEAD_GAP_S)
            if app._ahead == []:
                break
            await pilot.pause(navigation.AHEAD_GAP_S / 3)
        await polls(10)
        gc.collect()
        objects, caches = len(gc.get_objects()), cache_entries(app)
        await polls(80)
        gc.collect()
        grown, after = len(gc.get_objects()) - objects, cache_entries(app)
        # a frame's worth each (4 rows of 7 cells, the cursor's row twice; 63 cells, 9 lines
        # here), not one more frame's worth per poll (before: 164 -> 484 row lines, 1,000 lines)
        assert max(after.values()) <= 100, f"the render caches grew: {caches} -> {after}"
        # the app's own objects: none kept per poll (before: ~60 a poll, in the caches)
        assert grown < 500, f"{grown} more objects after 80 polls of the same fleet"


async def test_latency_is_redrawn_at_most_once_a_second():
    """At a half-second poll every answer brings a new latency: the Fleet view shows one a
    second, and a poll that moved nothing else on screen draws nothing."""
    clock = Clock()
    app = app_of(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one("#fleet-table", KeyedTable)
        for i in range(WARM):
            app.post_message(FleetPolled(snap(clock.now, i)))
            await pilot.pause()
            clock.now += 0.5
        shown = table.get_cell("a", "lat").plain
        drawn, changed = table._update_count, table.cells_changed
        for i in range(WARM, WARM + 8):
            app.post_message(FleetPolled(snap(clock.now, i)))
            await pilot.pause()
            clock.now += 0.5
            lat = table.get_cell("a", "lat").plain
            if i % 2:  # half a second after the figure shown: held, and nothing drawn
                assert lat == shown and table._update_count == drawn, i
                assert table.cells_changed == changed, i
            else:  # a second after: the new figure
                assert lat != shown and lat == f"{5 + i * 7 % 60}ms", i
                assert table.cells_changed - changed == len(HOSTS), i  # the four latencies
            shown, drawn, changed = lat, table._update_count, table.cells_changed


async def test_a_view_under_another_is_not_redrawn_until_shown(monkeypatch):
    """The Host view over the Fleet view: polls and the clock's ticks make no Fleet row (the
    view is hidden), and the Host view's tick draws its summary line only, not its tables;
    the Fleet view catches up with the newest poll when it is shown again."""
    made = Counter(monkeypatch, HostCells, "cells")
    tables = Counter(monkeypatch, host_screen, "schedule_rows")
    clock = Clock()
    app = app_of(clock)
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(FleetPolled(snap(clock.now, 0)))
        await pilot.pause()
        app.open_host("a")
        await pilot.pause()
        assert isinstance(app.screen, HostScreen)
        made.take(), tables.take()
        summary = app.screen.query_one("#host-summary", Static)
        for i in range(1, 7):
            clock.now += 0.5
            app.post_message(FleetPolled(snap(clock.now, i)))
            await pilot.pause()
            app.refresh_views(tick=True)
            await pilot.pause()
        assert made.take() == 0, "the hidden Fleet view made its rows"
        assert tables.take() == 6, "the Host view's tables: once a poll, not at each tick"
        assert "last answer 0s ago" in str(summary.render())
        clock.now += 5
        app.refresh_views(tick=True)
        await pilot.pause()
        assert tables.take() == 0 and "last answer 5s ago" in str(summary.render())
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert made.take() > 0 and table.get_cell("a", "lat").plain == f"{5 + 6 * 7 % 60}ms"
