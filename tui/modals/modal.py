"""What every pop-up shares: an error in its handlers opens the error window, esc closes it.

The confirmations that change a host build on it in `typed_confirm`.
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Label

from fleetdeck.tui.app_api import DashboardApp
from fleetdeck.tui.widgets.guard import GuardedPump


class Modal(GuardedPump, ModalScreen):
    """Base of every pop-up: an error in its handlers opens the error window, esc closes it."""

    BINDINGS = [Binding("escape", "cancel", "Close")]

    app: DashboardApp

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """Bring the focused control wholly into view. Textual's own scroll on focus asks only
        whether the control is on screen, so a field scrolled under the dialog's docked buttons
        (at 80x24, a purge's second path) took the typing out of sight; `scroll_visible` keeps
        clear of docked widgets."""
        self.call_after_refresh(self.bring_into_view, event.widget)

    def bring_into_view(self, widget: Widget) -> None:
        """Scroll so that `widget` and the label just above it (the words that say what to
        type) are in view; the widget wins where both cannot fit."""
        if self.focused is not widget:
            return
        siblings = list(widget.parent.children) if widget.parent is not None else []
        at = siblings.index(widget) if widget in siblings else 0
        if at and isinstance(label := siblings[at - 1], Label):
            label.scroll_visible(animate=False, immediate=True)
        widget.scroll_visible(animate=False, immediate=True)

    def action_cancel(self) -> None:
        """Close the pop-up."""
        self.dismiss()
