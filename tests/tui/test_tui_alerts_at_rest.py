"""The Alerts view at rest: the clock's tick makes no alert's row again; it makes the `since`
cells of the alerts on screen only, and the table draws only when one of them reads otherwise.
Hidden under another view, it makes nothing. Counted, never timed (the real monitor judges
real polls: one NaN run is one alert)."""

from __future__ import annotations

import sys

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.monitor.silences import SilenceStore
from fleetdeck.show import fmt
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views import alerts as alerts_view
from fleetdeck.tui.views.alerts import AlertsScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.alert_polls import nan_run, up
from support.counting import Counter
from support.recorded import feed

#: alerts: more than the table shows at 120x40
N = 60


class Clock:
    def __init__(self) -> None:
        self.now = 2000.0

    def __call__(self) -> float:
        return self.now


def app_of(clock: Clock) -> FleetdeckApp:
    runs = tuple(nan_run("h1", f"run-{i:02d}") for i in range(N))
    fleet = parse_fleet(f'[hosts.h1]\nlocal = true\npython = "{sys.executable}"\n', "fixture")
    snaps = [
        FleetSnapshot(hosts=(up("h1", t=1000.0 + 5 * i, runs=runs),), time=1000.0 + 5 * i)
        for i in range(2)
    ]
    app = FleetdeckApp(fleet, RecordedSource(snaps), autopoll=False, clock=clock)
    app.alert_watch.enabled = True  # a replay is not judged unless asked
    return app


async def test_a_tick_makes_only_the_since_cells_on_screen_and_draws_only_what_moved(monkeypatch):
    rows = Counter(monkeypatch, alerts_view, "alert_cells")
    ages = Counter(monkeypatch, alerts_view, "since_text")
    clock = Clock()
    app = app_of(clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, n=1)
        await pilot.press("5")
        await pilot.pause()
        assert isinstance(app.screen, AlertsScreen)
        table = app.screen.query_one("#alerts-table", KeyedTable)
        on_screen = table.keys_on_screen()
        assert len(table.keys) == N and 3 <= len(on_screen) < N, (len(table.keys), on_screen)
        first = on_screen[0]
        was = table.get_cell(first, "since").plain
        rows.take(), ages.take()
        drawn = table._update_count
        # a tick within the same second: the cells read the same, nothing is drawn
        clock.now += 0.4
        app.refresh_views(tick=True)
        await pilot.pause()
        assert rows.take() == 0, "a tick made whole alert rows"
        assert ages.take() == len(on_screen), "a tick made the ages of rows not on screen"
        assert table._update_count == drawn, "a tick that moved no figure drew the table"
        # a second later: the ages on screen move, drawn once
        clock.now += 1
        app.refresh_views(tick=True)
        await pilot.pause()
        assert rows.take() == 0 and ages.take() == len(on_screen)
        assert table._update_count == drawn + 1
        now = table.get_cell(first, "since").plain
        assert now != was and now == fmt.since_text(app.screen.shown[first].since, clock.now)
        # hidden under the Fleet view: the ticks make nothing of the Alerts view
        await pilot.press("1")
        await pilot.pause()
        for _ in range(3):
            clock.now += 1
            app.refresh_views(tick=True)
            await pilot.pause()
        assert rows.take() == 0 and ages.take() == 0


async def test_a_poll_reads_the_silences_file_a_few_times_not_once_per_alert(monkeypatch):
    """Each alert's silence was looked up with a look at the silences' file (a `stat`) first:
    a poll of 60 firing alerts on the Alerts view looked 240 times. The file is looked at once
    per list of alerts now."""
    looks = Counter(monkeypatch, SilenceStore, "refresh")
    clock = Clock()
    app = app_of(clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, n=1)
        await pilot.press("5")
        await pilot.pause()
        assert len(app.screen.query_one("#alerts-table", KeyedTable).keys) == N
        looks.take()
        await feed(app, pilot, n=1)
        n = looks.take()
        assert n <= 6, f"{n}: the silences' file was looked at once per alert"


async def test_a_poll_that_leaves_the_alerts_as_they_were_makes_only_the_ages_on_screen(
    monkeypatch,
):
    """A poll brings the same 60 alerts: no row is made again, only the `since` cells of those
    on screen; a silence added makes the rows again (the silenced one reads so)."""
    from fleetdeck.backend.monitor import silences as sil

    rows = Counter(monkeypatch, alerts_view, "alert_cells")
    ages = Counter(monkeypatch, alerts_view, "since_text")
    clock = Clock()
    app = app_of(clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, n=1)
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#alerts-table", KeyedTable)
        on_screen = table.keys_on_screen()
        rows.take(), ages.take()
        clock.now += 1
        await feed(app, pilot, n=1)
        assert rows.take() == 0, "a poll of the same alerts made their rows"
        assert ages.take() == len(on_screen)
        first = on_screen[0]
        assert table.get_cell(first, "since").plain == fmt.since_text(1000.0, clock.now)
        sil.add_silence(host="h1", duration=3600, comment="maintenance")
        await feed(app, pilot, n=1)
        assert rows.take() == N
        assert table.get_cell(first, "state").plain == "silenced"
