"""Pop-ups as an operator meets them: focus in the field to fill, a focus mark that needs no
colour, an action button that says what it will do and acts only on an exact match, buttons
on screen at 80x24, and Home / End / PgUp / PgDn in every table."""

from __future__ import annotations

import pytest
from textual.binding import Binding
from textual.geometry import Region
from textual.widgets import Button, Input

from fleetdeck.tui.modals.dialogs import help_text, key_label
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.modals import MODALS
from support.recorded import feed, fixture_app


async def opened(name, size=(100, 30)):
    app = fixture_app()
    ctx = app.run_test(size=size)
    pilot = await ctx.__aenter__()
    await feed(app, pilot)
    MODALS[name][0](app)
    await pilot.pause()
    await pilot.pause()
    return app, pilot, ctx


@pytest.mark.parametrize(
    "name,field",
    [
        ("purge", "confirm-0"),
        ("remove", "remove-confirm"),
        ("launch", "launch-toml"),
        ("mirror", "mirror-host"),
    ],
)
async def test_focus_starts_in_the_field_to_fill(name, field):
    app, pilot, ctx = await opened(name)
    try:
        assert app.focused is not None and app.focused.id == field
    finally:
        await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize("name", ["purge", "remove", "launch"])
async def test_focus_is_marked_without_colour(name):
    """The focused field has a block glyph at its left edge, the others a blank one; the
    focused button is in reverse video. Neither needs colour to be seen."""
    app, pilot, ctx = await opened(name)
    try:
        field = app.focused
        assert isinstance(field, Input)
        assert field.styles.border_left[0] == "outer"
        others = [i for i in app.screen.query(Input) if i is not field]
        for other in others:
            assert other.styles.border_left[0] in ("blank", "")
        cancel = app.screen.query_one("#cancel", Button)
        cancel.focus()
        await pilot.pause()
        assert cancel.styles.text_style.reverse
        assert field.styles.border_left[0] in ("blank", "")
    finally:
        await ctx.__aexit__(None, None, None)


async def test_action_buttons_say_what_they_do():
    app, pilot, ctx = await opened("purge")
    try:
        act = app.screen.query_one("#act", Button)
        assert str(act.label) == "Delete 2 paths, 16.0G" and act.disabled
        await app.screen.dismiss()
        MODALS["remove"][0](app)
        await pilot.pause()
        assert str(app.screen.query_one("#act", Button).label) == "Stop loop pid 5120"
    finally:
        await ctx.__aexit__(None, None, None)


async def test_enter_acts_only_when_the_typed_text_matches(monkeypatch):
    acted = []
    monkeypatch.setattr(RemoveScheduleModal, "act", lambda self: acted.append(self.schedule.id))
    monkeypatch.setattr(PurgeModal, "act", lambda self: acted.append("purge"))
    app, pilot, ctx = await opened("remove")
    try:
        modal = app.screen
        await pilot.press(*"loop-9c1e55a")  # one character short
        await pilot.press("enter")
        await pilot.pause()
        assert acted == [] and modal.query_one("#act", Button).disabled
        await pilot.press("a", "enter")
        await pilot.pause()
        assert acted == ["loop-9c1e55aa"]
        # a refused plan: typing the path exactly still does not act
        await modal.dismiss()
        from support.modals import purge_plan

        plan = purge_plan(refused=True)
        app.push_screen(PurgeModal("gx10", [p.path for p in plan.paths], plan=plan))
        await pilot.pause()
        for i, p in enumerate(plan.paths):
            app.screen.query_one(f"#confirm-{i}", Input).value = p.path
        await pilot.pause()
        app.screen.query_one("#confirm-1", Input).focus()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert acted == ["loop-9c1e55aa"] and app.screen.query_one("#act", Button).disabled
    finally:
        await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize("name", list(MODALS))
async def test_buttons_stay_on_screen_at_80x24(name):
    app, pilot, ctx = await opened(name, size=(80, 24))
    try:
        screen_region = Region(0, 0, 80, 24)
        buttons = list(app.screen.query(Button))
        assert buttons
        for b in buttons:
            r = b.region
            assert r.height and screen_region.contains_region(r), (b, r)
            # and the dialog does not cover it with something else
            assert app.screen.get_widget_at(r.x + 1, r.y + r.height // 2)[0] in (b, *b.children)
    finally:
        await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize(
    "view,table_id",
    [("1", "fleet-table"), ("2", "runs-table"), ("3", "sched-table"), ("4", "audit-table")],
)
async def test_home_end_pgup_pgdn_in_every_table(view, table_id):
    from fleetdeck.backend.actions import audit

    for i in range(40):
        audit.audit("schedule-ack", "gx10", "done", ids=[f"x{i}"])
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press(view)
        table = app.screen.query_one(f"#{table_id}", KeyedTable)
        table.focus()
        await pilot.pause()
        last = table.row_count - 1
        assert last >= 1
        await pilot.press("end")
        assert table.cursor_row == last
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("pagedown")
        assert table.cursor_row > 0
        await pilot.press("pageup")
        assert table.cursor_row == 0


async def test_help_is_generated_from_the_bindings(monkeypatch):
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.views.runs import RunsScreen
    from fleetdeck.tui.views.schedules import SchedulesScreen

    for cls in (FleetdeckApp, RunsScreen, SchedulesScreen, KeyedTable):
        for b in cls.BINDINGS:
            assert f"{key_label(b.key):<12}{b.tooltip or b.description}" in help_text().plain, b
    # a key added to a view appears in help with no other change
    monkeypatch.setattr(
        RunsScreen,
        "BINDINGS",
        RunsScreen.BINDINGS + [Binding("z", "zap", "Zap", tooltip="zap the run")],
    )
    text = help_text().plain
    runs = text[text.index("Runs view\n") : text.index("Schedules view\n")]
    assert f"{'z':<12}zap the run" in runs
