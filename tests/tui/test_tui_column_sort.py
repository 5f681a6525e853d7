"""Sort in one key: shift and a column's letter (underlined in its header), or a click on the
header, sorts the Runs and Schedules tables by that column; again turns the direction."""

from __future__ import annotations

from fleetdeck.tui.widgets.column_sort import sort_letters

from support.recorded import cell_text, feed, fixture_app


def test_every_column_gets_its_own_letter_from_its_label():
    assert sort_letters(["Host", "Run", "State", "Progress", "s/step", "ETA", "Loss", "Eval"]) == [
        "H",
        "R",
        "S",
        "P",
        "T",
        "E",
        "L",
        "V",
    ]
    assert sort_letters([" ", "Host", "Kind"]) == [None, "H", "K"]


async def test_shift_letter_and_a_header_click_sort_by_that_column_and_the_header_shows_it():
    app = fixture_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("3")
        table = app.screen.table
        table.focus()
        keys = list(table._spec)
        header = table.columns[next(c for c in table.columns if c.value == "host")].label
        assert header.plain == "Host" and any("underline" in str(s.style) for s in header.spans)
        await pilot.press("H")
        await pilot.pause()
        hosts = [cell_text(table, k, "host") for k in table.keys]
        assert hosts == sorted(hosts) and table.sort_by == (
            [k[0] for k in keys].index("host"),
            False,
        )
        assert "sorted by Host ↑" in app.screen.title
        assert (
            table.columns[next(c for c in table.columns if c.value == "host")].label.plain
            == "Host▲"
        )
        await pilot.press("H")
        await pilot.pause()
        assert [cell_text(table, k, "host") for k in table.keys] == sorted(hosts, reverse=True)
        assert "sorted by Host ↓" in app.screen.title
        # a click on the Kind header
        kind = [k[0] for k in keys].index("kind")
        x = sum(table.columns[c].get_render_width(table) for c in list(table.columns)[:kind]) + 2
        await pilot.click(table, offset=(x, 0))
        await pilot.pause()
        assert table.sort_by == (kind, False), table.sort_by
        assert "sorted by Kind ↑" in app.screen.title
        # the Runs view too
        await pilot.press("2")
        runs = app.screen.table
        runs.focus()
        await pilot.press("E")
        await pilot.pause()
        assert "sorted by ETA ↑" in app.screen.title


def test_the_free_columns_take_the_width_left_at_every_size_from_80_to_250():
    from fleetdeck.tui.views.runs import run_layout
    from fleetdeck.tui.views.schedules import sched_layout

    last = None
    for width in range(80, 251):
        w = sched_layout(width)
        # two cells of padding per column and the scrollbar: what is left is the command's
        assert sum(w.values()) + 2 * len(w) + 2 == width, (width, w)
        if last is not None and "kind" in w and "kind" in last:
            assert w["cmd"] >= last["cmd"] - 1 and w["why"] >= last["why"]
        last = w
        assert sum(run_layout(width).values()) + 2 * len(run_layout(width)) + 4 <= width
    assert sched_layout(250)["why"] > sched_layout(200)["why"] > sched_layout(120)["why"]
    assert sched_layout(250)["spec"] > sched_layout(120)["spec"]
    assert sched_layout(250)["cmd"] > sched_layout(200)["cmd"] > sched_layout(120)["cmd"]


def test_the_free_columns_get_what_their_text_needs_first_and_the_command_the_rest():
    from fleetdeck.tui.views.schedules import sched_layout

    need = {"why": 58, "spec": 30, "cmd": 60}
    for width in range(100, 251):
        w = sched_layout(width, need)
        assert sum(w.values()) + 2 * len(w) + 2 == width, (width, w)
        assert w["why"] >= 22 and w["spec"] >= 12 and w["cmd"] >= 12
    wide = sched_layout(250, need)
    assert (
        wide["why"] == 58 and wide["spec"] == 30 and wide["cmd"] > 60
    )  # whole, the rest to the command
    mid = sched_layout(160, need)
    assert 22 < mid["why"] < 58 and 12 < mid["spec"] < 30


async def test_the_schedules_view_shows_whole_reasons_and_commands_at_250_columns():
    from support.recorded import cell_text

    app = fixture_app()
    async with app.run_test(size=(250, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        screen = app.screen
        for key in screen.table.keys:
            s = screen._by_key.get(key)
            if s is None:
                continue
            assert len(cell_text(screen.table, key, "cmd")) <= screen._widths["cmd"]
            assert screen._widths["cmd"] >= len(s.command) and screen._widths["spec"] >= len(s.spec)
            if s.stray:
                assert screen._widths["why"] >= len(screen._why(s))


def _header_x(table, key):
    """The x offset, in the table, of the middle of column `key`'s header."""
    cols = list(table.columns)
    at = next(i for i, c in enumerate(cols) if c.value == key)
    return sum(table.columns[c].get_render_width(table) for c in cols[:at]) + 2


async def test_the_fleet_view_sorts_by_a_named_column_in_one_key_and_remembers_it():
    from fleetdeck.tui.settings import load

    app = fixture_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table")
        table.focus()
        assert table.column_sort
        label = table.columns[next(c for c in table.columns if c.value == "host")].label
        assert label.plain == "Host" and any("underline" in str(s.style) for s in label.spans)
        before = list(table.keys)
        await pilot.press("H")
        await pilot.pause()
        assert table.keys == sorted(before) and "sorted by Host ↑" in app.screen.title
        await pilot.press("H")
        await pilot.pause()
        assert table.keys == sorted(before, reverse=True) and "sorted by Host ↓" in app.screen.title
        # a click on the Status header sorts by it
        await pilot.click(table, offset=(_header_x(table, "status"), 0))
        await pilot.pause()
        assert table.sort_by == ([s[0] for s in table._spec].index("status"), False)
        assert "sorted by Status ↑" in app.screen.title
        await pilot.press("H")
        await pilot.pause()
    choice = load().table("fleet", "fleet-table")
    assert (choice.sort, choice.descending) == ("host", False)
    app = fixture_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table")
        assert table.keys == sorted(before) and "sorted by Host ↑" in app.screen.title


async def test_the_alerts_and_seats_tables_sort_by_a_named_column_in_one_key_and_remember_it():
    from fleetdeck.tui.settings import load

    from support.seat_polls import _host, _seat

    app = fixture_app()
    app.alert_watch.enabled = True
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#alerts-table")
        table.focus()
        subjects = [cell_text(table, k, "subject") for k in table.keys]
        assert len(set(subjects)) > 1
        await pilot.press("U")  # Subject: S and the rest of its letters before U are taken
        await pilot.pause()
        assert [cell_text(table, k, "subject") for k in table.keys] == sorted(subjects)
        assert "sorted by Subject ↑" in app.screen.title
        assert (
            table.columns[next(c for c in table.columns if c.value == "subject")].label.plain
            == "Subject▲"
        )
        await pilot.press("U")
        await pilot.pause()
        assert [cell_text(table, k, "subject") for k in table.keys] == sorted(
            subjects, reverse=True
        )
        await pilot.click(table, offset=(_header_x(table, "host"), 0))
        await pilot.pause()
        assert "sorted by Host ↑" in app.screen.title
    choice = load().table("alerts", "alerts-table")
    assert (choice.sort, choice.descending) == ("host", False)

    app = _seats_app(
        [_host("box", (), (_seat("box", 9002, 10), _seat("box", 9000, 11), _seat("box", 9001, 12)))]
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("5")
        await pilot.pause()
        seats = app.screen.query_one("#seats-table")
        seats.focus()
        await pilot.press("P")
        await pilot.pause()
        assert [cell_text(seats, k, "port") for k in seats.keys] == ["9000", "9001", "9002"]
        await pilot.press("P")
        await pilot.pause()
        assert [cell_text(seats, k, "port") for k in seats.keys] == ["9002", "9001", "9000"]
    choice = load().table("alerts", "seats-table")
    assert (choice.sort, choice.descending) == ("port", True)


def _seats_app(hosts):
    from support.seat_polls import _seats_app as make

    return make(hosts)


def test_the_runs_name_column_is_as_wide_as_the_widest_name_and_the_rest_goes_to_progress():
    from fleetdeck.tui.views.runs import NAME_MAX, run_layout

    for width in range(80, 251):
        w = run_layout(width, {"name": 6, "host": 7})
        assert w["name"] == 8 and w["host"] == 10
        assert sum(w.values()) + 2 * len(w) + 4 <= width
        long = run_layout(width, {"name": 70, "host": 30})
        assert long["name"] <= NAME_MAX and sum(long.values()) + 2 * len(long) + 4 <= width
    wide = run_layout(200, {"name": 6, "host": 7})
    assert wide["prog"] > run_layout(200)["prog"]
    assert run_layout(200, {"name": 30, "host": 18})["name"] == 30
    assert run_layout(200, {"name": 30, "host": 18})["host"] == 18


async def test_the_runs_view_gives_short_names_a_narrow_column_and_the_bar_the_rest():
    app = fixture_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        screen = app.screen
        table = screen.table
        widest = max(len(r.name) for r in app.state.runs)
        assert widest < 20
        name_w = table.columns[next(c for c in table.columns if c.value == "name")].width
        assert name_w == max(8, widest), (name_w, widest)
        prog_w = table.columns[next(c for c in table.columns if c.value == "prog")].width
        assert prog_w > 18
        for key in table.keys:
            r = screen._by_key[key]
            assert cell_text(table, key, "name") == r.name  # whole
            if r.max_steps:
                assert len(cell_text(table, key, "prog")) > 18  # the bar took the room
