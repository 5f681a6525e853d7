"""`since` is computed once for the dashboard and `fleetdeck alerts`: a dashboard that has watched
a stray schedule for 9 minutes and `alerts` run beside it (no `watch` running, so no saved alert
state) say the same 9 minutes; before, `alerts` said "0s ago"."""

from __future__ import annotations

import io

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Schedule
from fleetdeck.cli.watch import Watcher
from fleetdeck.show.fmt import since_text
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import cell_text

T = 1_800_000_000.0
FLEET = "[hosts.gx10]\nlocal = true\n"
STRAY = Schedule(
    id="cron-3f2a9c01",
    host="gx10",
    kind="crontab",
    user="ops",
    spec="*/5 * * * *",
    command="/home/ops/bin/check-run.sh",
    source="crontab",
    stray=True,
    reasons=("unacknowledged",),
)


def poll(at: float) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=(HostSnapshot(name="gx10", reachable=True, time=at, schedules=(STRAY,)),), time=at
    )


async def dashboard_watches(times: list[float], clock: list[float]) -> str:
    """Run the dashboard over polls at `times`; the Since cell of the stray's alert at the end."""
    app = FleetdeckApp(
        parse_fleet(FLEET, "fixture"),
        RecordedSource([poll(t) for t in times]),
        autopoll=False,
        clock=lambda: clock[0],
    )
    app.alert_watch.enabled = True
    async with app.run_test(size=(120, 30)) as pilot:
        for t in times:
            clock[0] = t
            app.poll_fleet()
            await app.workers.wait_for_complete()
            await pilot.pause()
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#alerts-table", KeyedTable)
        (key,) = [k for k in table.keys if cell_text(table, k, "rule") == "new-stray"]
        return cell_text(table, key, "since")


async def alerts_judges_at(now: float):
    """What `fleetdeck alerts` does (a read-only Watcher, one poll), on a poll at `now`."""
    w = Watcher(
        parse_fleet(FLEET, "fixture"),
        out=io.StringIO(),
        readonly=True,
        source=RecordedSource([poll(now)]),
    )
    await w.run(count=1)
    (a,) = [a for a in w.engine.alerts() if a.rule == "new-stray"]
    return a


async def test_alerts_beside_a_dashboard_says_the_dashboards_since():
    clock = [0.0]
    dash = await dashboard_watches([T - 540 + 60 * i for i in range(10)], clock)
    assert dash == "9m00s ago"
    a = await alerts_judges_at(T)
    assert a.since == T - 540
    assert since_text(a.since, T) == dash


async def test_an_observer_that_stopped_recording_long_ago_says_nothing_of_now():
    # a dashboard watched it 30 to 25 minutes ago and quit: nobody saw what happened since
    clock = [0.0]
    await dashboard_watches([T - 1800 + 60 * i for i in range(6)], clock)
    a = await alerts_judges_at(T)
    assert a.since == T and since_text(a.since, T) == "0s ago"
