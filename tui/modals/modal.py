"""What every pop-up shares: an error in its handlers opens the error window, esc closes it.

The confirmations that change a host build on it in `typed_confirm`.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import ModalScreen

from fleetdeck.tui.widgets.guard import GuardedPump


class Modal(GuardedPump, ModalScreen):
    """Base of every pop-up: an error in its handlers opens the error window, esc closes it."""

    BINDINGS = [Binding("escape", "cancel", "Close")]

    def action_cancel(self) -> None:
        """Close the pop-up."""
        self.dismiss()
