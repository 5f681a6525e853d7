"""Silences from the Alerts view: `s` opens a small form prefilled from the highlighted alert and
adds the silence as the CLI does (saved, audited); the alert stays listed, marked with who and
until when, rings and toasts no more and leaves the badge; `e` expires it again. Pilot tests
over recorded polls (the silences themselves are real files in the test's state folder)."""

from __future__ import annotations

from fleetdeck.backend.actions import audit
from fleetdeck.backend.monitor import silences as sil
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.alert_polls import alert_toasts, app_over, nan_run, up
from support.recorded import feed


def cell(table: KeyedTable, key: str, col: str) -> str:
    from support.recorded import cell_text

    return cell_text(table, key, col)


async def test_s_silences_the_highlighted_alert_which_stays_listed_and_marked_and_e_expires_it():
    from fleetdeck.tui.modals.silence import SilenceModal

    app = app_over((up("h1", runs=(nan_run("h1"),)),), (up("h1", t=1005.0, runs=(nan_run("h1"),)),))
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot, n=1)
        await pilot.press("5")
        await pilot.pause()
        assert app.sub_title.startswith("⚠ 1 alert")
        await pilot.press("s")
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, SilenceModal)
        assert modal.fields() == {
            "host": "h1",
            "rule": "loss-nonfinite",
            "subject": "/runs/run-7",
            "duration": 7200.0,
            "comment": "",
        }
        await pilot.press("enter")  # no comment yet: refused in place
        await pilot.pause()
        assert app.screen is modal and "needs a comment" in str(
            modal.query_one("#silence-said").render()
        )
        await pilot.press(*"known: bad lr", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, SilenceModal)
        (s,) = sil.load_silences()[0]
        assert (s.host, s.rule, s.subject, s.comment) == (
            "h1",
            "loss-nonfinite",
            "/runs/run-7",
            "known: bad lr",
        )
        assert [r["id"] for r in audit.read_audit() if r["action"] == "silence-add"] == [s.id]
        table = app.screen.query_one("#alerts-table", KeyedTable)
        (key,) = table.keys
        assert cell(table, key, "state") == "silenced"
        assert cell(table, key, "text").startswith(f"silenced by {s.by} until ")
        detail = str(app.screen.query_one("#alerts-detail").render())
        assert (
            f"Silenced by {s.by} until" in detail and s.id in detail and "known: bad lr" in detail
        )
        assert "(1 silenced)" in str(app.screen.query_one("#alerts-title").render())
        assert s.id in app.screen.query_one("#silences-table", KeyedTable).keys
        assert not app.sub_title.startswith("⚠")  # the badge counts what is not silenced
        await pilot.press("e")
        await pilot.pause()
        assert sil.load_silences()[0][0].state(s.ends) == "expired"
        assert cell(table, key, "state") == "firing" and app.sub_title.startswith("⚠ 1 alert")
        assert not app.screen.query_one("#silences-table", KeyedTable).display


async def test_a_silenced_critical_alert_neither_rings_nor_toasts():
    sil.add_silence(host="h1", duration=3600, comment="maintenance")
    app = app_over((up("h1"),), (up("h1", t=1005.0, runs=(nan_run("h1"),)),))
    notes: list = []
    rang: list = []
    async with app.run_test(size=(100, 30)) as pilot:
        app.notify = lambda msg, **kw: notes.append((msg, kw))  # type: ignore[method-assign]
        app.bell = lambda: rang.append(1)  # type: ignore[method-assign]
        await feed(app, pilot, n=2)
        assert [a.rule for a in app.alert_watch.firing] == ["loss-nonfinite"]
        assert alert_toasts(notes) == [] and rang == []


async def test_at_80x24_every_field_of_the_silence_form_shows_above_its_buttons():
    """The comment is required and the form starts in it: at 80x24 the whole form shows at once
    (a form scrolled to its focused field hid it under the docked buttons on a real terminal),
    every field above the buttons."""
    from fleetdeck.tui.modals.silence import SilenceModal

    app = app_over((up("h1", runs=(nan_run("h1"),)),), (up("h1", t=1005.0, runs=(nan_run("h1"),)),))
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, n=1)
        await pilot.press("5")
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, SilenceModal)
        dialog = modal.query_one("#silence-dialog")
        assert dialog.max_scroll_y == 0, (
            "the form is taller than the screen: part of it is scrolled away"
        )
        buttons = modal.query_one("#silence-dialog .buttons").region
        for fid in (
            "silence-host",
            "silence-rule",
            "silence-subject",
            "silence-for",
            "silence-comment",
        ):
            r = modal.query_one(f"#{fid}").region
            assert r.height >= 1 and r.bottom <= buttons.y and r.bottom <= 24, (fid, r, buttons)
        await pilot.press(*"disk swap")
        await pilot.pause()
        assert modal.fields()["comment"] == "disk swap"
