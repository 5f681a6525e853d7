"""Alert toasts as a first-time operator meets them: only a critical alert pops up (the others
are in the Alerts view and the badge), opening the dashboard on a fleet where much is already
wrong gives one toast that says how many and where to look, and no toast ever covers a pop-up's
fields: it waits until the pop-up closes."""

from __future__ import annotations

from fleetdeck.backend.fleet.models import Run

from support.alert_polls import alert_toasts, app_over, nan_run, stray, up
from support.recorded import feed, fixture_app


async def test_alerts_that_are_not_critical_never_toast(monkeypatch):
    from fleetdeck.backend.monitor.rules import alerts

    monkeypatch.setattr(alerts, "LOOP_SETTLE_S", 0.0)
    app = fixture_app()
    app.alert_watch.enabled = True
    notes: list[tuple[str, dict]] = []
    async with app.run_test(size=(80, 24)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        await feed(app, pilot, n=2)
        firing = app.alert_watch.firing
        assert firing and {a.severity for a in firing} <= {"warning", "info"}, firing
        assert alert_toasts(notes) == []
        assert app.sub_title.startswith(f"⚠ {len(firing)} alert")  # the badge still counts them


async def test_critical_alerts_firing_at_start_are_one_toast():
    hosts = tuple(
        up(f"h{i}", runs=(nan_run(f"h{i}"),), schedules=(stray(f"h{i}", i),)) for i in range(3)
    )
    app = app_over(hosts)
    notes: list[tuple[str, dict]] = []
    async with app.run_test(size=(80, 24)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        await feed(app, pilot, n=1)
        toasts = alert_toasts(notes)
        assert len(toasts) == 1, toasts
        msg, kw = toasts[0]
        assert msg.startswith("3 critical alerts firing (loss-nonfinite)") and "press 5" in msg
        assert kw["title"] == "Alerts" and kw["severity"] == "error"


async def test_a_critical_alert_toasts_once_and_a_warning_beside_it_does_not():
    first = (up("h1"),)
    later = (
        up(
            "h1",
            t=1005.0,
            runs=(
                nan_run("h1"),
                Run(
                    host="h1",
                    path="/runs/run-8",
                    name="run-8",
                    state="stalled",
                    reason="no progress for 900s",
                ),
            ),
        ),
    )
    app = app_over(first, later, later)
    notes: list[tuple[str, dict]] = []
    async with app.run_test(size=(100, 30)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        await feed(app, pilot, n=3)
        assert [k["title"] for _, k in alert_toasts(notes)] == [
            "ALERT loss-nonfinite on h1: /runs/run-7"
        ]


async def test_a_toast_waits_while_a_popup_is_open_and_shows_when_it_closes():
    """The mirror pop-up's "To host" field was covered by toasts: an alert that starts firing
    while any pop-up is open is held, and shown once it closes."""
    from textual.screen import ModalScreen

    app = app_over((up("h1"),), (up("h1", t=1005.0, runs=(nan_run("h1"),)),))
    notes: list[tuple[str, dict]] = []
    async with app.run_test(size=(100, 30)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        await feed(app, pilot, n=1)
        await pilot.press("question_mark")  # the help pop-up
        await pilot.pause()
        assert isinstance(app.screen, ModalScreen)
        await feed(app, pilot, n=1)  # the run's loss turns NaN meanwhile
        assert [a.rule for a in app.alert_watch.firing] == ["loss-nonfinite"]
        assert alert_toasts(notes) == []  # nothing over the pop-up
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ModalScreen)
        assert [k["title"] for _, k in alert_toasts(notes)] == [
            "ALERT loss-nonfinite on h1: /runs/run-7"
        ]


async def test_a_toast_waits_behind_any_pop_up_the_silence_form_and_a_filter_prompt_included():
    """Not only the confirmations: the silence form (typed into) and a table's filter prompt (a
    plain ModalScreen) hold an alert's toast too, until they close."""
    from textual.screen import ModalScreen

    app = app_over(
        (up("h1"),),
        (up("h1", t=1005.0, runs=(nan_run("h1"),)),),
        (up("h1", t=1010.0, runs=(nan_run("h1"), nan_run("h1", "run-8"))),),
    )
    notes: list[tuple[str, dict]] = []
    async with app.run_test(size=(100, 30)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        await feed(app, pilot, n=1)
        await pilot.press("5")
        await pilot.pause()
        await pilot.press("s")  # the silence form
        await pilot.pause()
        assert isinstance(app.screen, ModalScreen)
        await feed(app, pilot, n=1)
        assert alert_toasts(notes) == []
        await pilot.press("escape")
        await pilot.pause()
        assert [k["title"] for _, k in alert_toasts(notes)] == [
            "ALERT loss-nonfinite on h1: /runs/run-7"
        ]
        await pilot.press("slash")  # the filter prompt
        await pilot.pause()
        assert isinstance(app.screen, ModalScreen)
        await feed(app, pilot, n=1)
        assert len(alert_toasts(notes)) == 1
        await pilot.press("escape")
        await pilot.pause()
        assert [k["title"] for _, k in alert_toasts(notes)][
            -1
        ] == "ALERT loss-nonfinite on h1: /runs/run-8"
