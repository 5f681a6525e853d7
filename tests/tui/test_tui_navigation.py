"""Navigation and memory: esc goes back the way you came, the `:` command line takes view and
host names, and the sort, filter and theme are remembered in settings.toml."""

from __future__ import annotations

import os

from textual.widgets import Input, Label

from fleetdeck.tui.settings import load, settings_path
from fleetdeck.tui.views.host import HostScreen
from fleetdeck.tui.widgets.command_line import CommandLine, complete, parse

from support.recorded import cell_text, feed, fixture_app


async def test_esc_goes_back_through_the_views_the_way_you_came():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2", "3", "5")
        assert app.current_mode == "alerts"
        await pilot.press("escape")
        assert app.current_mode == "schedules"
        await pilot.press("escape")
        assert app.current_mode == "runs"
        await pilot.press("escape")
        assert app.current_mode == "fleet"
        await pilot.press("escape")  # at the first view: stays
        assert app.current_mode == "fleet"


async def test_colon_opens_a_view_for_one_host_a_host_view_and_says_what_names_nothing():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("colon", *"schedules gx10", "enter")
        await pilot.pause()
        assert app.current_mode == "schedules"
        table = app.screen.table
        assert table.keys and {cell_text(table, k, "host") for k in table.keys} == {"gx10"}
        assert "gx10 only" in app.screen.sub_title
        await pilot.press("colon", *"schedules", "enter")
        await pilot.pause()
        assert app.screen.host_scope is None and len(table.keys) == 3
        await pilot.press("colon", *"runs ana-ml2", "enter")
        await pilot.pause()
        assert app.current_mode == "runs" and app.screen.table.keys == []
        await pilot.press("colon", *"host ana-ml2", "enter")
        await pilot.pause()
        assert isinstance(app.screen, HostScreen) and app.screen.host_name == "ana-ml2"
        await pilot.press("escape")
        assert app.current_mode == "runs" and not isinstance(app.screen, HostScreen)
        # a name that is nothing: the line stays open and says so
        await pilot.press("colon", *"nosuch", "enter")
        await pilot.pause()
        assert isinstance(app.screen, CommandLine)
        why = str(app.screen.query_one("#cmd-why", Label).render())
        assert "no such view or host: 'nosuch'" in why and "gx10" in why
        # tab completes
        field = app.screen.query_one("#cmd-input", Input)
        field.value = ""
        await pilot.press(*"sch", "tab")
        assert field.value == "schedules "
        await pilot.press(*"an", "tab", "enter")
        await pilot.pause()
        assert app.current_mode == "schedules" and app.screen.host_scope == "ana-ml2"
        assert {cell_text(app.screen.table, k, "host") for k in app.screen.table.keys} == {
            "ana-ml2"
        }


def test_the_command_line_parses_views_hosts_and_refuses_with_a_sentence():
    hosts = ["gx10", "ana-ml2"]
    assert parse(":runs GX10", hosts).host == "gx10"
    assert parse("gx10", hosts).view == "host"
    assert parse("q", hosts).view == "quit"
    for bad, words in (
        ("runs nope", "no such host: 'nope'"),
        ("host", "which host?"),
        ("a b c", "one view"),
    ):
        try:
            parse(bad, hosts)
        except ValueError as e:
            assert words in str(e)
        else:
            raise AssertionError(bad)
    assert complete("ru", hosts) == "runs" and complete("runs g", hosts) == "runs gx10"
    assert complete("zz", hosts) is None


async def test_sort_filter_and_theme_are_remembered_and_a_bad_file_is_a_warning_left_alone():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        app.screen.table.focus()
        await pilot.press("E", "E")  # ETA, then downward
        await pilot.press("slash", *"gx", "enter", "t")
        await pilot.pause()
    saved = load()
    assert saved.problem is None and saved.theme == "textual-light"
    choice = saved.table("runs", "runs-table")
    assert (choice.sort, choice.descending, choice.filter) == ("eta", True, "gx")
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.table
        assert (
            table.sort_by == (list(app.screen._widths).index("eta"), True)
            and table.filter_text == "gx"
        )
        assert "sorted by ETA ↓" in app.screen.title and app.theme == "textual-light"
    path = settings_path()
    bad = '[views.runs.runs-table]\nsort = "eta"\ncolour = "red"\n'
    path.write_text(bad)
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any(
            "unknown key 'colour' in [views.runs.runs-table]" in m and "defaults" in m for m in said
        ), said
        assert app.screen.table.sort_by is None
        app.screen.table.focus()
        await pilot.press("o")
        await pilot.pause()
    assert path.read_text() == bad  # never written over
    assert not [f for f in os.listdir(path.parent) if f.startswith(".settings.")]


async def test_a_filter_that_matches_nothing_says_so_rather_than_no_schedules_found():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        await pilot.press("3")
        app.screen.table.focus()
        await pilot.press("slash", *"zebra", "enter")
        await pilot.pause()
        detail = str(app.screen.query_one("#sched-detail").render())
        assert "matched 0 of 3 rows" in detail and "No schedules found" not in detail
        await pilot.press("2")
        app.screen.table.focus()
        await pilot.press("slash", *"zebra", "enter")
        await pilot.pause()
        assert "matched 0 of 2 runs" in str(app.screen.query_one("#run-title").render())
