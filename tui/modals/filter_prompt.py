"""The filter line a table opens with `/`: the table narrows as the operator types."""

from __future__ import annotations

from typing import Protocol

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class Filterable(Protocol):
    """What the prompt narrows: a table's filter, a log's search."""

    filter_text: str

    def set_filter(self, text: str) -> None:
        """Show what `text` lets through ('' for everything)."""


class FilterPrompt(ModalScreen[None]):
    """One line at the bottom: typing filters the table behind it (or searches the log); enter
    keeps the filter, esc clears it."""

    DEFAULT_CSS = """
    FilterPrompt { align: left bottom; background: $background 0%; }
    FilterPrompt > #filter-line { height: 3; width: 100%; background: $panel; layout: horizontal; }
    FilterPrompt Label { padding: 1 1 0 1; width: auto; }
    FilterPrompt Input { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "clear", "Clear", tooltip="clear the filter and close")]

    def __init__(
        self,
        table: Filterable,
        label: str = "filter /",
        placeholder: str = "any case; enter keeps it, esc clears it",
    ) -> None:
        super().__init__()
        self.table = table
        self.label = label
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Horizontal(id="filter-line"):
            yield Label(self.label)
            yield Input(
                value=self.table.filter_text, placeholder=self.placeholder, id="filter-input"
            )

    def on_input_changed(self, event: Input.Changed) -> None:
        self.table.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(None)

    def action_clear(self) -> None:
        self.table.set_filter("")
        self.dismiss(None)
