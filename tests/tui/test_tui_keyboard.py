"""Every pop-up by keyboard alone, at 80x24 and 120x40: focus starts in the field to fill, Tab
visits only controls that are on screen (not under the docked buttons) and that say what they
are, Enter in a field does what the primary button says, and esc keeps what was typed.

The pop-ups are opened as the views open them; from then on only keys are pressed."""

from __future__ import annotations

import pytest
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from fleetdeck.backend.fleet.models import Process
from fleetdeck.tui.modals.holders import HoldersModal
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal
from fleetdeck.tui.modals.silence import SilenceModal
from fleetdeck.tui.modals.stop import StopProcessModal

from support.modals import MODALS, purge_plan
from support.recorded import feed, fixture_app

PROC = Process(pid=7, start=1, user="ops", command="python3 train.py --config run-7.toml")

OPEN = {
    "purge": MODALS["purge"][0],
    "mirror": MODALS["mirror"][0],
    "launch": MODALS["launch"][0],
    "remove": MODALS["remove"][0],
    "stop": lambda app: app.push_screen(StopProcessModal("gx10", PROC)),
    "silence": lambda app: app.push_screen(SilenceModal("gx10", "host-down", None)),
    "holders": lambda app: app.push_screen(HoldersModal("gx10", "/home/ops/runs/run-7")),
}

#: the field each pop-up's focus starts in
FIRST = {
    "purge": "confirm-0",
    "mirror": "mirror-host",
    "launch": "launch-toml",
    "remove": "remove-confirm",
    "stop": "stop-confirm",
    "silence": "silence-comment",
    "holders": "holders-path",
}

SIZES = [(80, 24), (120, 40)]


async def opened(name, size):
    app = fixture_app()
    ctx = app.run_test(size=size)
    pilot = await ctx.__aenter__()
    await feed(app, pilot)
    OPEN[name](app)
    await pilot.pause()
    await pilot.pause()
    return app, pilot, ctx


def on_screen(widget: Widget) -> bool:
    """Every row of `widget` is drawn where it is, not covered (by the docked buttons, say)."""
    screen = widget.screen
    r = widget.region
    if not r.height or not r.width:
        return False
    for y in range(r.y, r.y + r.height):
        at, _ = screen.get_widget_at(r.x + min(1, r.width - 1), y)
        if at is not widget and widget not in at.ancestors:
            return False
    return True


def label_of(widget: Widget) -> str:
    """What tells the operator what this control is: a button's words, else the text just
    before it (a Label or Static), its placeholder or its border title."""
    if isinstance(widget, Button):
        return str(widget.label)
    siblings = list(widget.parent.children) if widget.parent is not None else []
    before = siblings[: siblings.index(widget)]
    for w in reversed(before):
        if isinstance(w, (Label, Static)) and not isinstance(w, Button):
            text = str(w.render()).strip()
            if text:
                return text
        if isinstance(w, (Input, Select, DataTable, Button)):
            break
    return getattr(widget, "placeholder", "") or str(widget.border_title or "")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(OPEN))
async def test_tab_visits_every_stop_on_screen_and_labelled(name, size):
    app, pilot, ctx = await opened(name, size)
    try:
        assert app.focused is not None and app.focused.id == FIRST[name]
        chain = [w for w in app.screen.focus_chain]
        visited: list[Widget] = []
        for _ in range(len(chain) + 1):
            await pilot.pause()
            w = app.focused
            assert w is not None
            # the cursor of a Select or a table is inside the widget: the widget is the stop
            assert on_screen(w), f"{name} at {size}: {w!r} is focused but not on screen"
            assert label_of(w), f"{name} at {size}: {w!r} is a stop that says nothing"
            visited.append(w)
            await pilot.press("tab")
        # one lap visits each stop once and comes back to the first
        assert visited[-1] is visited[0]
        assert len(set(map(id, visited[:-1]))) == len(visited) - 1 == len(chain)
    finally:
        await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_every_purge_path_field_is_scrolled_clear_of_the_buttons(size):
    """At 80x24 the second path's field sat under the docked buttons when Tab reached it."""
    app, pilot, ctx = await opened("purge", size)
    try:
        for i in range(2):
            field = app.screen.query_one(f"#confirm-{i}", Input)
            assert app.focused is field
            assert on_screen(field)
            await pilot.press("tab")
            await pilot.pause()
    finally:
        await ctx.__aexit__(None, None, None)


def typed_key(name: str) -> str:
    return {
        "purge": purge_plan().paths[0].path,
        "remove": "loop-9c1e55aa",
        "stop": "7 python3",
    }[name]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["remove", "stop", "purge"])
async def test_enter_in_the_last_field_does_what_the_button_says(monkeypatch, name, size):
    acted = []
    for cls in (RemoveScheduleModal, StopProcessModal, PurgeModal):
        monkeypatch.setattr(
            cls, "act", lambda self: acted.append(str(self.query_one("#act").label))
        )
    app, pilot, ctx = await opened(name, size)
    try:
        modal = app.screen
        fields = modal.fields
        for field in fields:
            assert app.focused is field
            await pilot.press(*modal.expected(field), "enter")
            await pilot.pause()
        assert acted == [str(modal.query_one("#act", Button).label)]
        assert acted[0] and acted[0] not in ("OK", "Confirm")
    finally:
        await ctx.__aexit__(None, None, None)


async def test_enter_in_the_silence_pop_up_adds_the_silence_its_button_names():
    app, pilot, ctx = await opened("silence", (80, 24))
    try:
        modal = app.screen
        button = modal.query_one("#act", Button)
        assert str(button.label) == "Silence host-down on gx10 for 2 hours"
        await pilot.press("shift+tab", "shift+tab")  # back to the subject
        await pilot.pause()
        assert app.focused.id == "silence-subject"
        await pilot.press(*"/runs/run-7")
        await pilot.pause()
        assert str(button.label) == "Silence host-down /runs/run-7 on gx10 for 2 hours"
        await pilot.press("enter")  # no reason yet: to the reason's field, nothing added
        await pilot.pause()
        assert app.screen is modal and app.focused.id == "silence-comment"
        await pilot.press(*"swap the seat", "enter")
        await pilot.pause()
        assert app.screen is not modal
        from fleetdeck.backend.monitor.silences import load_silences

        (s,) = load_silences()[0]
        assert (s.host, s.rule, s.subject, s.comment) == (
            "gx10",
            "host-down",
            "/runs/run-7",
            "swap the seat",
        )
    finally:
        await ctx.__aexit__(None, None, None)


async def test_enter_in_holders_asks_and_so_does_its_button(monkeypatch):
    asked = []
    monkeypatch.setattr(HoldersModal, "ask", lambda self, path: asked.append(path))
    app, pilot, ctx = await opened("holders", (80, 24))
    try:
        await pilot.press("enter")
        await pilot.pause()
        assert asked == ["/home/ops/runs/run-7"]
        await pilot.press("tab", "tab")  # Close, Ask (the table is no stop while empty)
        await pilot.pause()
        assert app.focused.id == "act" and "who holds it" in str(app.focused.label)
        await pilot.press("enter")
        await pilot.pause()
        assert asked == ["/home/ops/runs/run-7"] * 2
    finally:
        await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize("name", ["purge", "remove", "stop"])
async def test_esc_keeps_what_was_typed_for_the_same_thing_only(name):
    app, pilot, ctx = await opened(name, (80, 24))
    try:
        part = typed_key(name)[:9]
        first = app.screen.fields[0]
        await pilot.press(*part)
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, (PurgeModal, RemoveScheduleModal, StopProcessModal))
        OPEN[name](app)
        await pilot.pause()
        again = app.screen.fields[0]
        assert again is not first and again.value == part
        assert app.focused is again  # still wrong: focus is where typing goes on
        await pilot.press("escape")
        await pilot.pause()
        if name == "purge":  # other paths: nothing carried over
            plan = purge_plan()
            app.push_screen(PurgeModal("gx10", [plan.paths[1].path], plan=None))
            await pilot.pause()
            assert app.screen.fields[0].value == ""
    finally:
        await ctx.__aexit__(None, None, None)


async def test_mirror_and_launch_enter_runs_the_check_their_primary_button_names(monkeypatch):
    """Enter never copies nor starts: it runs the dry run or the pre-flight (the primary
    button), and once that passed focus moves to the button that says what will happen."""
    called = []
    monkeypatch.setattr(MirrorModal, "start_dry_run", lambda self: called.append("dry"))
    monkeypatch.setattr(LaunchModal, "run_preflight", lambda self: called.append("preflight"))
    for name, button in (("mirror", "dry"), ("launch", "preflight")):
        app, pilot, ctx = await opened(name, (80, 24))
        try:
            primary = app.screen.query_one(f"#{button}", Button)
            assert primary.variant == "primary"
            await pilot.press("tab") if name == "mirror" else None  # host chosen: to the path
            await pilot.pause()
            assert isinstance(app.focused, Input)
            await pilot.press("enter")
            await pilot.pause()
            assert called[-1] == ("dry" if name == "mirror" else "preflight")
        finally:
            await ctx.__aexit__(None, None, None)
