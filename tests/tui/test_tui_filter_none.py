"""A filter that lets no row through says so, and of how many, in every view with a filter:
not "no hosts in the fleet file" or "No alerts" over a fleet that has them."""

from __future__ import annotations

from support.recorded import feed, fixture_app


def _said(app, selector) -> str:
    return str(app.screen.query_one(selector).render()).replace("\n", " ")


async def test_a_filter_matching_no_host_says_it_matched_none_of_how_many():
    app = fixture_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await feed(app, pilot)
        app.screen.query_one("#fleet-table").focus()
        await pilot.press("slash", *"zebra", "enter")
        await pilot.pause()
        said = _said(app, "#fleet-detail")
        assert (
            "The filter 'zebra' matched 0 of 4 hosts" in said
            and "no hosts in the fleet file" not in said
        )
        await pilot.press("escape")
        await pilot.pause()
        assert "zebra" not in _said(app, "#fleet-detail")


async def test_a_filter_matching_no_alert_or_seat_says_it_matched_none_of_how_many():
    from support.seat_polls import _host, _seat, _seats_app

    app = fixture_app()
    app.alert_watch.enabled = True
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#alerts-table")
        n = len(table.keys)
        assert n > 1
        table.focus()
        await pilot.press("slash", *"zebra", "enter")
        await pilot.pause()
        said = _said(app, "#alerts-detail")
        assert f"The filter 'zebra' matched 0 of {n} alerts" in said and "No alerts" not in said

    app = _seats_app([_host("box", (), (_seat("box", 9000, 10), _seat("box", 9001, 11)))])
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, 1)
        await pilot.press("5")
        await pilot.pause()
        app.screen.query_one("#seats-table").focus()
        await pilot.press("slash", *"zebra", "enter")
        await pilot.pause()
        assert "The filter 'zebra' matched 0 of 2 seats" in _said(app, "#seats-check")
        await pilot.press("d")  # no seat to describe: says why, opens nothing
        await pilot.pause()
        assert app.screen.query("#seats-table")


async def test_a_filter_matching_no_audit_record_says_so_not_that_none_were_recorded():
    from fleetdeck.backend.actions import audit

    audit.audit(
        "schedule-remove",
        "ana-ml2",
        "done",
        schedule={"kind": "loop", "id": "loop-9c1e55aa", "command": "bash -c 'sleep 5'"},
        reason_code=None,
        message="stopped pid 77",
    )
    app = fixture_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        app.screen.query_one("#audit-table").focus()
        await pilot.press("slash", *"zebra", "enter")
        await pilot.pause()
        said = _said(app, "#audit-detail")
        assert (
            "The filter 'zebra' matched 0 of 1 action" in said and "No actions recorded" not in said
        )
