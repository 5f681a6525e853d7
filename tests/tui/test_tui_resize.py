"""Resizing the terminal, on every view and modal, at any moment, never crashes the dashboard.

The first build rebuilt the fleet table on resize by mounting a second widget with the same id
before the old one was gone (`DuplicateIds: 'fleet-table'`). These tests resize every screen
several times, in storms of back-to-back resize events and one at a time, down to 80x24 and
back, and check the app is still running and still shows what it showed.
"""

from __future__ import annotations

import pytest
from textual.events import Resize
from textual.geometry import Size

from fleetdeck.tui.views.host import HostScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.modals import MODALS
from support.recorded import feed, fixture_app

SIZES = [(80, 24), (200, 60), (100, 30), (81, 25), (80, 24), (160, 48), (120, 40)]


def post_resize(app, w: int, h: int) -> None:
    """What the terminal driver does on SIGWINCH."""
    app._driver._size = Size(w, h)
    app.post_message(Resize(Size(w, h), Size(w, h)))


async def storm(app, pilot) -> None:
    """Resize several times back to back (no pause), then one at a time, ending at 100x30."""
    for w, h in SIZES:
        post_resize(app, w, h)
    await pilot.pause()
    for w, h in SIZES + [(100, 30)]:
        await pilot.resize_terminal(w, h)
        # a poll landing between resizes must be safe too
        app.poll_fleet()
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert app.is_running and app.return_code is None
    assert app.size == Size(100, 30)


@pytest.mark.parametrize("view", ["1", "2", "3", "4"])
async def test_resize_storm_on_every_view(view):
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press(view)
        await pilot.press("j")
        screen = app.screen
        tables = list(screen.query(KeyedTable))
        cursor = tables[0].current_key
        await storm(app, pilot)
        assert app.screen is screen
        # the same widgets, the cursor where the operator left it
        assert list(screen.query(KeyedTable)) == tables
        assert tables[0].current_key == cursor


async def test_resize_storm_on_the_host_view():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("j", "enter")
        assert isinstance(app.screen, HostScreen)
        await storm(app, pilot)
        assert isinstance(app.screen, HostScreen)
        await pilot.press("escape")
        await storm(app, pilot)  # and back on the fleet view, which was resized underneath
        assert app.screen.query_one("#fleet-table", KeyedTable).current_key == "ana-ml2"


@pytest.mark.parametrize("name", list(MODALS))
async def test_resize_storm_on_every_modal(name):
    opener, cls = MODALS[name]
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        opener(app)
        await pilot.pause()
        assert isinstance(app.screen, cls)
        focused = app.focused
        await storm(app, pilot)
        assert isinstance(app.screen, cls)
        assert app.focused is focused
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, cls)
        # the views underneath took every resize too
        await storm(app, pilot)


async def test_resize_during_the_first_poll():
    """A resize that arrives before the first poll and one that arrives with it."""
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        post_resize(app, 80, 24)
        app.poll_fleet()
        post_resize(app, 200, 60)
        await app.workers.wait_for_complete()
        await pilot.pause()
        await storm(app, pilot)
        assert app.screen.query_one("#fleet-table", KeyedTable).keys
