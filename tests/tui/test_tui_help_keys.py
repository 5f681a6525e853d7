"""The help screen spells keys as printed on the keyboard and scrolls with j / k."""

from __future__ import annotations

from fleetdeck.tui.modals.dialogs import HelpScreen, help_text

from support.recorded import feed, fixture_app


def test_help_spells_slash_and_colon_and_names_the_new_keys():
    text = help_text().plain
    assert "slash" not in text and "colon" not in text
    lines = text.splitlines()
    assert any(line.strip().startswith("/ ") and "filter" in line for line in lines)
    assert any(line.strip().startswith(": ") and "command line" in line for line in lines)
    for words in (
        "shift+X  ",
        "shift+letter",
        "Traceback, a nan or an error",
        "wrap long lines",
        "the next match",
    ):
        assert words in text, words


async def test_j_and_k_scroll_the_help():
    app = fixture_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        body = app.screen.query_one("#help-body")
        assert body.max_scroll_y > 0
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert body.scroll_y == 3
        await pilot.press("k")
        await pilot.pause()
        assert body.scroll_y == 2
