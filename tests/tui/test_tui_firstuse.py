"""What a first-time operator tripped over on a live 3-host fleet: at 80 columns a purge
plan's sizes and checks, a mirror's verdict, the audit details and a run's progress figures
stay on screen; the Host view's command is not pushed off by a long reason; a failed run
without a recorded reason says so."""

from __future__ import annotations

import dataclasses

from rich.text import Text

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views.host import host_schedule_columns
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.local_app import local_app, make_run, open_purge
from support.recorded import NAMES, T, feed, fixture_app, recorded, visible_columns


def plain(v) -> str:
    return v.plain if isinstance(v, Text) else str(v)


def with_runs(**changes) -> FleetSnapshot:
    """The recorded fleet with gx10's first run changed."""
    snap = recorded("fleet.json")
    hosts = []
    for h in snap.hosts:
        if h.name == "gx10":
            h = dataclasses.replace(
                h, runs=(dataclasses.replace(h.runs[0], **changes), *h.runs[1:])
            )
        hosts.append(h)
    return dataclasses.replace(snap, hosts=tuple(hosts))


def app_over(snap: FleetSnapshot) -> FleetdeckApp:
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in NAMES), "fixture")
    return FleetdeckApp(fleet, RecordedSource([snap, snap]), autopoll=False, clock=lambda: T)


async def test_purge_plan_keeps_size_and_checks_on_screen_at_80_columns(tmp_path):
    deep = "a-long-run-name-" + "x" * 40
    _, ck = make_run(tmp_path, deep)
    app = local_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        table = modal.query_one("#purge-plan")
        await pilot.pause()
        assert table.virtual_size.width <= table.size.width, "the plan scrolls sideways"
        path, size, checks = (plain(c) for c in table.get_row_at(0))
        # the path whole, wrapped within its column: its row as tall as it needs
        assert path == str(ck)
        (row,) = table.rows.values()
        assert row.height >= 3, row.height
        assert "checks passed" in checks
        # typed in full where it is typed
        labels = [plain(lb.render()) for lb in modal.query("Label")]
        assert any(str(ck) in lb.replace("\n", "") for lb in labels), labels
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        (row,) = table.rows.values()  # the plan is laid out again for the new width
        assert plain(table.get_row_at(0)[0]) == str(ck) and row.height < 3
        await pilot.resize_terminal(80, 24)  # and back: the path column shrinks again
        await pilot.pause()
        assert table.virtual_size.width <= table.size.width, (
            "the plan scrolls sideways after a resize"
        )
        (row,) = table.rows.values()
        assert plain(table.get_row_at(0)[0]) == str(ck) and row.height >= 3


async def test_audit_view_at_80_columns_gives_the_details_room():
    audit.audit("mirror", "ana-ml2", "done", src="gx10:/home/ops/runs/run-6/adapter")
    app = app_over(recorded("fleet.json"))
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        table = app.screen.query_one("#audit-table", KeyedTable)
        keys = [c.key.value for c in table.ordered_columns]
        assert "user" not in keys and "what" in visible_columns(table, 80)
        key = table.keys[0]
        stamp = plain(table.get_cell(key, "time"))
        assert len(stamp) == 14 and stamp[2] == "-" and stamp[5] == " "
        assert plain(table.get_cell(key, "what")).startswith("src gx10:/home/ops")
        await pilot.resize_terminal(140, 40)
        await pilot.pause()
        assert [c.key.value for c in table.ordered_columns][4] == "user"
        assert plain(table.get_cell(key, "time")).endswith("+0000")


def test_host_schedule_columns_leave_the_command_room():
    wide = dict((k, w) for k, _, w in host_schedule_columns(200))
    assert wide["cmd"] >= 100 and wide["stray"] <= 48
    for width in (80, 100, 120):
        cols = host_schedule_columns(width)
        assert sum(w for _, _, w in cols) + 2 * len(cols) <= width - 2, width
        assert dict((k, w) for k, _, w in cols)["cmd"] >= 16


async def test_progress_figures_always_fit_their_cell():
    app = app_over(with_runs(step=131, max_steps=1000))
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        key = next(k for k in table.keys if k.startswith("gx10:"))
        cell = plain(table.get_cell(key, "prog"))
        width = table.columns[
            next(c.key for c in table.ordered_columns if c.key.value == "prog")
        ].width
        assert cell.endswith(" 131/1000") and len(cell) <= width


async def test_failed_run_without_a_reason_says_so():
    app = app_over(with_runs(state="failed", reason=None, pid=None))
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        failed = with_runs().hosts[0].runs[0]  # the run made failed: listed after the finished one
        table.move_cursor(row=table.get_row_index(failed.key))
        await pilot.pause()
        title = plain(app.screen.query_one("#run-title").render())
        assert "why failed: no reason recorded" in title


async def test_the_field_to_type_stays_in_view_when_the_plan_arrives_at_80x24(tmp_path):
    """Focus goes to the path field before the host's plan is in; the plan then pushes the
    field below the dialog's fold unless it is scrolled back into view."""
    _, ck = make_run(tmp_path)
    app = local_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        await pilot.pause()
        field = modal.query_one("#confirm-0")
        dialog = modal.query_one(".dialog")
        assert app.focused is field
        assert dialog.max_scroll_y > 0, "the plan must be taller than the dialog for this test"
        assert dialog.scroll_y > 0
        top = field.region.y
        assert dialog.region.y < top and field.region.bottom <= dialog.region.bottom


async def test_a_refused_plan_stays_at_its_top_at_80x24(tmp_path):
    """A refused plan has no field worth typing into: its refusal, at the top, stays in view."""
    run, ck = make_run(tmp_path)
    import shutil

    shutil.rmtree(run / "adapter")  # no keeper: every checkpoint of the run is refused
    app = local_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        await pilot.pause()
        assert modal.plan is not None and not modal.plan.ok
        assert modal.query_one(".dialog").scroll_y == 0
        assert "refused" in plain(modal.query_one("#purge-verdict").render())


async def test_runs_table_never_scrolls_sideways_at_80x24_with_many_runs():
    """Fourteen runs: the table scrolls down, and on 24 lines the view scrolls too; with both
    scrollbars the columns must still fit (the loss lost its last digit)."""
    snap = recorded("fleet.json")
    hosts = []
    for h in snap.hosts:
        if h.name == "gx10":
            h = dataclasses.replace(
                h,
                runs=tuple(
                    dataclasses.replace(h.runs[0], name=f"run-{i}", path=f"/r/run-{i}", loss=0.4553)
                    for i in range(14)
                ),
            )
        hosts.append(h)
    app = app_over(dataclasses.replace(snap, hosts=tuple(hosts)))
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#runs-table", KeyedTable)
        assert table.show_vertical_scrollbar
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert table.render_line(1).text.rstrip().endswith("0.4553")


def test_chart_axis_labels_have_the_same_decimals():
    from fleetdeck.show.cells import axis_labels, loss_chart

    assert axis_labels(1.95, 1.0) == ("1.95", "1.00")
    assert axis_labels(3.412, 3.16) == ("3.412", "3.160")
    assert axis_labels(2.0, 1.0) == ("2", "1")
    chart = loss_chart([(10, 1.95), (200, 1.0)], [], 30, 4).plain.splitlines()
    assert chart[0].split("┤")[0].strip() == "1.95" and chart[3].split("┤")[0].strip() == "1.00"


def test_a_host_that_did_not_answer_says_why_in_a_few_words():
    from fleetdeck.backend.fleet.models import HostSnapshot
    from fleetdeck.tui.rows.fleet import down_words, latency_text

    def host(error, code):
        return HostSnapshot(name="h", reachable=False, error=error, error_code=code)

    assert down_words(
        host("cannot connect to 127.0.0.1:2222: connection refused", "unreachable")
    ) == ("DOWN", "conn. refused")
    assert down_words(host("authentication refused by 127.0.0.1:22 for ops: no key", "auth")) == (
        "LOGIN REFUSED",
        "fix the login",
    )
    assert down_words(host("connection to 10.0.0.9:22 timed out after 5s", "timeout")) == (
        "DOWN",
        "timed out",
    )
    assert down_words(host("host key of x:22 CHANGED: ...", "host-key-changed"))[0] == "KEY CHANGED"
    assert down_words(host("probe did not answer within 30s", None)) == (
        "DOWN",
        "probe did not answer within 30s",
    )
    assert [latency_text(x) for x in (41.2, 999, 11512, 250_000)] == [
        "41ms",
        "999ms",
        "11.5s",
        "250s",
    ]


async def test_loss_chart_fits_its_pane_at_80x24_when_the_detail_scrolls():
    """A long path and many evals make the detail pane scroll, and its scrollbar takes two
    columns: the chart is drawn for the room it has, never wrapped."""
    evals = [(s, 3.5 - s / 1000) for s in range(10, 200, 10)]
    losses = [(s, 3.6 - s / 900) for s in range(1, 200)]
    app = app_over(
        with_runs(
            path="/home/ops/runs/" + "a-very-long-run-folder-name-" * 3,
            losses=losses,
            eval_losses=evals,
            step=199,
            max_steps=400,
        )
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        await pilot.pause()
        detail = app.screen.query_one("#run-detail")
        assert detail.show_vertical_scrollbar, "the case under test: the detail pane scrolls"
        chart = app.screen.query_one("#run-chart")
        lines = plain(chart.render()).splitlines()
        assert len(lines) == 11 and chart.size.height == 11
        assert max(len(x.rstrip()) for x in lines) <= chart.content_size.width
        assert lines[9].rstrip().endswith("step 199")


async def test_schedules_at_80_columns_say_why_in_words_that_fit():
    app = app_over(recorded("fleet.json"))
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        table = app.screen.query_one("#sched-table", KeyedTable)
        width = table.columns[
            next(c.key for c in table.ordered_columns if c.key.value == "why")
        ].width
        whys = [plain(table.get_cell(k, "why")) for k in table.keys]
        assert all(len(w) <= width for w in whys), whys
        assert any(w in ("duplicate", "path missing", "not acked") or "," in w for w in whys), whys
        await pilot.resize_terminal(140, 40)
        await pilot.pause()
        whys = [plain(table.get_cell(k, "why")) for k in table.keys]
        assert any(w.startswith(("names ", "the same command", "nobody has")) for w in whys), whys


async def test_the_footer_names_every_other_view_and_quit_within_80_columns():
    """`5 Alerts` is in the footer of every other view, the view on screen leaves its own key
    out, and nothing is cut at 80 columns (the Runs view, with Purge and Mirror, is the widest)."""
    from textual.widgets._footer import FooterKey

    views = {"1": "Fleet", "2": "Runs", "3": "Schedules", "4": "Audit", "5": "Alerts"}
    app = fixture_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        for key, name in views.items():
            await pilot.press(key)
            await pilot.pause()
            keys = [k for k in app.screen.query(FooterKey) if k.display]
            shown = {k.description for k in keys}
            assert shown >= {v for k, v in views.items() if k != key} | {"Quit", "Help"}, (
                name,
                shown,
            )
            assert name not in shown, f"the {name} view's own key is in its footer"
            assert max(k.region.right for k in keys) <= 80, (
                name,
                [(k.description, k.region) for k in keys],
            )
        await pilot.press("1")
        await pilot.pause()
        app.open_host(NAMES[0])
        await pilot.pause()
        shown = {k.description for k in app.screen.query(FooterKey) if k.display}
        assert {"Fleet", "Alerts", "Quit"} <= shown, (
            "from the Host view, 1 goes back to the Fleet view"
        )
        await pilot.press("1")
        await pilot.pause()
        assert type(app.screen).__name__ == "FleetScreen"


async def test_the_alert_badge_leads_the_subtitle_and_names_its_key():
    from fleetdeck.tui.alert_watch import badge_text

    assert badge_text(0) == ""
    assert badge_text(1) == "⚠ 1 alert (press 5)"
    assert badge_text(3) == "⚠ 3 alerts (press 5)"
    assert badge_text(3, on_alerts_view=True) == "⚠ 3 alerts"
