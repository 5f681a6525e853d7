"""Snapshot (pytest-textual-snapshot) of the Alerts view over the recorded fleet, with seats on
a shared card. Update with `pytest tests/monitor/test_alerts_snapshot.py --snapshot-update`."""

from __future__ import annotations

import time

from support.recorded import feed, fixture_app, with_seats


def test_alerts_view(snap_compare, monkeypatch):
    from fleetdeck.backend.monitor.rules import alerts

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    # the recorded fleet's stray loops fire on the first poll, as if they had run for a while
    monkeypatch.setattr(alerts, "LOOP_SETTLE_S", 0.0)
    app = fixture_app()
    app.source.snapshots = [with_seats(s) for s in app.source.snapshots]
    app.alert_watch.enabled = True

    async def run_before(pilot):
        await feed(app, pilot)
        app.clear_notifications()  # the view, not the toasts that announced its alerts
        await pilot.pause()

    try:
        assert snap_compare(app, terminal_size=(120, 40), run_before=run_before, press=["5"])
    finally:
        monkeypatch.undo()
        time.tzset()
