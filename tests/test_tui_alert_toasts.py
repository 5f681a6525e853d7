"""Alert toasts as a first-time operator meets them: opening the dashboard on a fleet where
much is already wrong gives one toast that says how many and where to look, not one per alert."""

from __future__ import annotations

from test_tui_views import feed, fixture_app


async def test_alerts_firing_at_start_are_one_toast(monkeypatch):
    from fleetdeck.backend.monitor import alerts

    # the recorded fleet's stray loops fire on the first poll, as if they had run for a while
    monkeypatch.setattr(alerts, "LOOP_SETTLE_S", 0.0)
    app = fixture_app()
    app.alert_watch.enabled = True   # a replay is not judged unless asked
    notes: list[tuple[str, dict]] = []
    async with app.run_test(size=(80, 24)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        await feed(app, pilot, n=1)
        firing = app.alert_watch.firing
        assert len(firing) > 1, "the recorded fleet has several stray schedules"
        alert_toasts = [(m, k) for m, k in notes if str(k.get("title", "")).startswith(("ALERT", "Alerts"))]
        assert len(alert_toasts) == 1, alert_toasts
        msg, kw = alert_toasts[0]
        assert msg.startswith(f"{len(firing)} alerts firing") and "press 5" in msg
        assert kw["title"] == "Alerts"
