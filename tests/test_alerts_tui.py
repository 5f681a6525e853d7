"""The dashboard's Alerts view (`5`) and badge, fed recorded polls through the FleetPolled path."""

from __future__ import annotations

from test_tui_views import cell_text, feed, fixture_app

from fleetdeck.tui.widgets.keyed_table import KeyedTable


async def test_alerts_view_lists_what_fires_and_the_header_carries_a_badge():
    app = fixture_app()
    app.alert_watch.enabled = True   # a replay is not judged unless asked
    base = app.sub_title
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        firing = app.alert_watch.firing
        assert firing, "the recorded fleet has stray schedules and a stalled run"
        assert app.sub_title == f"{base} · ⚠ {len(firing)} alert{'' if len(firing) == 1 else 's'}"
        await pilot.press("5")
        table = app.screen.query_one("#alerts-table", KeyedTable)
        assert len(table.keys) == len(firing)
        rules = {cell_text(table, k, "rule") for k in table.keys}
        assert rules == {a.rule for a in firing}
        assert all(cell_text(table, k, "state") == "firing" for k in table.keys)
        detail = str(app.screen.query_one("#alerts-detail").render())
        assert firing[0].text[:40] in detail.replace("\n", " ") or firing[0].title in detail


async def test_a_replay_is_not_judged_by_default():
    app = fixture_app()
    base = app.sub_title
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        assert app.alert_watch.firing == [] and app.sub_title == base
        await pilot.press("5")
        assert app.screen.query_one("#alerts-table", KeyedTable).keys == []
        assert "No alerts" in str(app.screen.query_one("#alerts-detail").render())
