"""Small modals: the help screen listing every key, and the error modal for the unexpected."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Button, Label, Static

from .modal import Modal

# Every key, by where it works. Kept as data so the help screen and the README agree.
KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Everywhere", [
        ("1 / 2 / 3 / 4", "Fleet / Runs / Schedules / Audit view"),
        ("↑ ↓  j k", "move in a table; PgUp/PgDn, Home/End too"),
        ("tab / shift+tab", "next / previous table or field"),
        ("enter", "open (a host, a run's details)"),
        ("esc", "back: close a modal or the Host view, else go to the Fleet view"),
        ("n", "launch a run (pre-flight first)"),
        ("g", "poll every host now"),
        ("t", "toggle light / dark theme"),
        ("ctrl+p", "command palette: every action by name"),
        ("?", "this help"),
        ("q", "quit"),
    ]),
    ("Fleet view", [("enter", "open the Host view of the highlighted host")]),
    ("Runs view", [
        ("enter", "show the run's checkpoints (focus moves to them)"),
        ("space", "mark / unmark the highlighted checkpoint for purge"),
        ("p", "purge the marked checkpoints (or the highlighted one)"),
        ("m", "mirror the run's adapter to another host and verify it"),
        ("l", "reload the tail of train.log"),
    ]),
    ("Schedules view", [
        ("a", "acknowledge the highlighted schedule (no longer stray for being unknown)"),
        ("x", "remove it: type its id back to confirm"),
    ]),
    ("In a modal", [
        ("tab", "move between fields and buttons"),
        ("enter", "press the focused button"),
        ("esc", "cancel and close"),
    ]),
]


def help_text() -> Text:
    """Every key as a formatted block."""
    t = Text()
    for section, keys in KEYS:
        t.append(f"{section}\n", style="bold underline")
        for key, what in keys:
            t.append(f"  {key:<18}", style="bold cyan")
            t.append(f"{what}\n")
        t.append("\n")
    return t


class HelpScreen(Modal):
    """Every key of the dashboard."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label("Keys  (↑ ↓ PgUp PgDn scroll, esc closes)", classes="title")
            with VerticalScroll(id="help-body"):
                yield Static(help_text())
            yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()

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
            yield Label(f"Unexpected error during {self.what}", classes="title")
            yield Static("The dashboard is still running. The details below are for a bug report.",
                         classes="detail")
            with VerticalScroll(can_focus=False):
                yield Static(Text(self.details), id="error-details")
            yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()

    def on_button_pressed(self) -> None:
        self.dismiss()
