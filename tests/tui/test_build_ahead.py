"""The views built ahead of their first switch (`tui/navigation.py`, `AHEAD`): after the first
poll, while the app waits, the Schedules and Runs views are built hidden with the fleet the poll
brought; the screen on display does not change, and the first switch into one shows that very
screen, as a switch into a view seen before does. Counted, never timed (the figures:
benchmarks/tui_big.py)."""

from __future__ import annotations

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run, Schedule
from fleetdeck.tui import navigation
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views.fleet import FleetScreen
from fleetdeck.tui.views.runs import RunsScreen
from fleetdeck.tui.views.schedules import SchedulesScreen


def snap(step: int) -> FleetSnapshot:
    run = Run(host="a", path="/r/one", name="one", state="running", step=step, max_steps=100)
    sched = Schedule(
        id="c-" + "0" * 22,
        host="a",
        kind="crontab",
        user="ops",
        spec="*/5 * * * *",
        command="/usr/local/bin/job",
        source="crontab",
    )
    host = HostSnapshot(name="a", reachable=True, time=1.0, runs=(run,), schedules=(sched,))
    return FleetSnapshot(hosts=(host,), time=1.0)


def app_of() -> FleetdeckApp:
    fleet = parse_fleet("[hosts.a]\nlocal = true\n", "x")
    return FleetdeckApp(fleet, RecordedSource([snap(1)]), autopoll=False, clock=lambda: 1.0)


async def built(pilot, app: FleetdeckApp) -> None:
    # every step done: built, laid out, drawn (one every AHEAD_GAP_S, later on a busy machine)
    for _ in range(200):
        if app._ahead == []:
            break
        await pilot.pause(navigation.AHEAD_GAP_S / 3)


async def test_the_views_are_built_hidden_after_the_first_poll_and_shown_as_built():
    app = app_of()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(navigation.AHEAD_GAP_S * 2)
        assert app.built_ahead == ()  # nothing is built before a poll has brought the fleet
        app.post_message(FleetPolled(snap(1)))
        await pilot.pause()
        await built(pilot, app)
        assert app.built_ahead == ("schedules", "runs")
        assert isinstance(app.screen, FleetScreen) and app.current_mode == "fleet"
        ahead = {m: app.get_screen_stack(m)[0] for m in app.built_ahead}
        assert all(s.is_mounted and s.ready and not s.is_current for s in ahead.values())
        # laid out at the app's size while hidden (then its tables' lines drawn into their caches)
        assert all(s.table.size.width == 120 for s in ahead.values())
        # the hidden Runs view asked no host for its run's train.log: that waits for the switch
        assert ahead["runs"]._log_for is None
        # a later poll leaves the hidden views alone; the switch shows the built screen caught up
        app.post_message(FleetPolled(snap(42)))
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        assert app.screen is ahead["runs"] and isinstance(app.screen, RunsScreen)
        assert app.screen._log_for == "a:/r/one"  # and read once it is on screen
        assert app.screen.table.current_key is not None
        assert "42" in "".join(
            str(c) for c in app.screen.table.get_row(app.screen.table.current_key)
        )
        await pilot.press("3")
        await pilot.pause()
        assert app.screen is ahead["schedules"] and isinstance(app.screen, SchedulesScreen)
        assert app.screen.table.row_count == 1
