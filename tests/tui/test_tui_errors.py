"""An internal error in a view, an action, a modal or a timer opens the error window; the
dashboard keeps running and keeps answering keys afterwards."""

from __future__ import annotations

from fleetdeck.tui.modals.dialogs import ErrorModal
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.views.fleet import FleetScreen
from fleetdeck.tui.views.runs import RunsScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import feed, fixture_app


async def close_error_and_check_alive(app, pilot, details: str) -> None:
    assert isinstance(app.screen, ErrorModal), app.screen
    assert details in app.screen.details
    assert app.is_running and app.return_code is None
    await pilot.press("escape")
    await pilot.pause()
    assert not isinstance(app.screen, ErrorModal)
    # still answers keys: switch views and back
    await pilot.press("2")
    assert isinstance(app.screen, RunsScreen)
    await pilot.press("1")
    assert isinstance(app.screen, FleetScreen)


async def test_error_in_a_views_event_handler(monkeypatch):
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)

        def broken(self):
            raise RuntimeError("detail pane bug")

        monkeypatch.setattr(FleetScreen, "show_detail", broken)
        await pilot.press("j")  # row highlighted -> show_detail raises in the screen's handler
        await pilot.pause()
        monkeypatch.undo()
        await close_error_and_check_alive(app, pilot, "detail pane bug")
        # the fleet screen's own message loop survived: highlighting still updates the detail
        await pilot.press("j")
        await pilot.pause()
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert table.current_key in str(app.screen.query_one("#fleet-detail").render())


async def test_error_in_an_action(monkeypatch):
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")

        def broken(self):
            raise KeyError("no such checkpoint")

        monkeypatch.setattr(RunsScreen, "action_purge", broken)
        await pilot.press("p")
        await pilot.pause()
        monkeypatch.undo()
        await close_error_and_check_alive(app, pilot, "no such checkpoint")


async def test_error_in_a_modal_handler(monkeypatch):
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, LaunchModal)

        def broken(self, *a):
            raise AttributeError("'NoneType' object has no attribute 'checks'")

        monkeypatch.setattr(LaunchModal, "on_input_changed", broken)
        await pilot.press("x")
        await pilot.pause()
        monkeypatch.undo()
        assert isinstance(app.screen, ErrorModal)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, LaunchModal)  # the modal is still there and still works
        await pilot.press("y")
        await pilot.pause()
        assert app.screen.query_one("#launch-toml").value.endswith("xy")


async def test_error_in_a_timer_callback_and_only_one_window():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)

        def broken():
            raise ZeroDivisionError("timer bug")

        timer = app.set_interval(0.05, broken)
        await pilot.pause(0.4)  # several ticks: one error window, not a stack of them
        timer.stop()
        assert sum(isinstance(s, ErrorModal) for s in app.screen_stack) == 1
        assert app.is_running and "timer bug" in app.screen.details


async def test_package_changed_on_disk_says_restart(monkeypatch):
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")

        def gone(self):
            raise ModuleNotFoundError("No module named 'fleetdeck.tui.modals.purge'")

        monkeypatch.setattr(RunsScreen, "action_purge", gone)
        await pilot.press("p")
        await pilot.pause()
        assert isinstance(app.screen, ErrorModal)
        assert "start fleetdeck again" in app.screen.details and "restart" in app.screen.what


async def test_error_escaping_a_worker(monkeypatch):
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)

        def broken(self, text):
            raise TypeError("log pane bug")

        monkeypatch.setattr(RunsScreen, "show_log", broken)
        await pilot.press("2")  # the Runs view reads train.log in a worker, which raises
        await app.workers.wait_for_complete()
        await pilot.pause()
        monkeypatch.undo()
        await close_error_and_check_alive(app, pilot, "log pane bug")
