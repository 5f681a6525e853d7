"""Small modals: the help screen listing every key, and the error modal for the unexpected.

Help lists each view's keys from the views the app registered (`tui/view_registry.py`): this
module imports no view."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, DataTable, Label, Static

from fleetdeck.show.fmt import said
from fleetdeck.tui.keys import APP_BINDINGS
from fleetdeck.tui.modals.modal import Modal
from fleetdeck.tui.modals.typed_confirm import TypedConfirmModal
from fleetdeck.tui.view_registry import VIEWS
from fleetdeck.tui.widgets.keyed_table import KeyedTable, NavTable

#: an app's BINDINGS as Textual types them (help lists the `Binding`s among them)
AppBindings = Sequence[Binding | tuple[str, ...]]


def help_sections(
    app_bindings: AppBindings = APP_BINDINGS,
) -> list[tuple[str, list[Binding]]]:
    """Every key, by where it works, read from the bindings themselves so help cannot drift.
    `app_bindings` are the keys that work everywhere: the running app passes its own. Each
    view's keys come from the views registered (`VIEWS`), in their order."""

    def own(bindings: Sequence[object]) -> list[Binding]:
        return [b for b in bindings if isinstance(b, Binding) and not b.system]

    palette = Binding(
        App.COMMAND_PALETTE_BINDING,
        "command_palette",
        "Palette",
        tooltip="command palette: every view, host and action by name",
    )
    focus = [
        Binding(
            b.key,
            b.action,
            b.description,
            tooltip={"tab": "next table or field", "shift+tab": "previous table or field"}.get(
                b.key, b.description
            ),
        )
        for b in own(Screen.BINDINGS)
        if b.key in ("tab", "shift+tab")
    ]
    table_keys = (
        own(NavTable.BINDINGS)
        + own(KeyedTable.BINDINGS)
        + [b for b in own(DataTable.BINDINGS) if b.key in ("up", "down", "pageup", "pagedown")]
        + [
            Binding(
                "shift+X",
                "sort_on",
                "Sort by",
                tooltip="Runs, Schedules: sort by the column whose letter X is "
                "underlined in its header (shift+letter; again: the other way); a click on a header does the same",
            )
        ]
    )
    modal_keys = own(TypedConfirmModal.BINDINGS) + [
        Binding(
            "enter",
            "press",
            "Press",
            tooltip="in a field: act once it matches; on a button: press it",
        )
    ]
    return [
        ("Everywhere", own(app_bindings) + [palette] + focus),
        ("Tables", table_keys),
        *(
            (heading, [b for cls in classes for b in own(cls.BINDINGS)])
            for heading, classes in VIEWS.help_sections()
        ),
        ("In a pop-up", modal_keys),
    ]


def key_label(key: str) -> str:
    """A binding's key as printed on the keyboard ('question_mark' -> '?')."""
    names = {
        "question_mark": "?",
        "escape": "esc",
        "pageup": "PgUp",
        "pagedown": "PgDn",
        "home": "Home",
        "end": "End",
        "up": "↑",
        "down": "↓",
        "slash": "/",
        "colon": ":",
        "space": "space",
        "N": "N (shift+n)",
        "E": "E (shift+e)",
        "G": "G (shift+g)",
    }
    return " ".join(names.get(k.strip(), k.strip()) for k in key.split(","))


def help_text(app_bindings: AppBindings = APP_BINDINGS) -> Text:
    """Every key as a formatted block, from `help_sections()`."""
    t = Text()
    for section, bindings in help_sections(app_bindings):
        t.append(f"{section}\n", style="bold underline")
        for b in bindings:
            t.append(f"  {key_label(b.key):<12}", style="bold")
            t.append(f"{b.tooltip or b.description}\n")
        t.append("\n")
    return t


class HelpScreen(Modal):
    """Every key of the dashboard; `app_bindings`, the app's own keys, come from the app that
    opens it."""

    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
        Binding("j", "scroll('down')", "Down", show=False),
        Binding("k", "scroll('up')", "Up", show=False),
    ]

    def __init__(self, app_bindings: AppBindings = APP_BINDINGS) -> None:
        super().__init__()
        self.app_bindings = app_bindings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label("Keys  (j k ↑ ↓ PgUp PgDn scroll, esc closes)", classes="title")
            with VerticalScroll(id="help-body"):
                yield Static(help_text(self.app_bindings))
            yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()

    def action_scroll(self, way: str) -> None:
        """j / k: one line down or up, as the arrows do."""
        body = self.query_one("#help-body", VerticalScroll)
        (body.scroll_down if way == "down" else body.scroll_up)(animate=False)

    def on_button_pressed(self) -> None:
        self.dismiss()


class ErrorModal(Modal):
    """Something unexpected went wrong; the dashboard keeps running."""

    BINDINGS = [Binding("escape", "dismiss", "Close")]

    def __init__(self, what: str, details: str) -> None:
        super().__init__()
        self.what = what
        self.details = details

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog error", id="error"):
            yield Label(Text(f"Unexpected error during {said(self.what)}"), classes="title")
            yield Static(
                "The dashboard is still running. The details below are for a bug report.",
                classes="detail",
            )
            with VerticalScroll(can_focus=False):
                yield Static(Text(said(self.details)), id="error-details")
            yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()

    def on_button_pressed(self) -> None:
        self.dismiss()
