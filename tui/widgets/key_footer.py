"""The views' footer: Textual's own, recomposed only when the keys it shows change.

Textual's `Footer` composes its keys again (about thirty widgets mounted and styled) each time
the screen says its bindings may have changed, and a screen says so on every view switch and
every focus move, and a view left behind says so too as it loses its focus: two recomposes a view
switch, most of the switch's cost, for keys that were mostly the very ones already on screen. This
footer leaves a view's keys alone while the view is not on screen (it looks again when the view
comes back) and recomposes only when the keys it would show differ from those it shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.widgets import Footer

if TYPE_CHECKING:
    from textual.screen import Screen


def shown_keys(screen: Screen) -> tuple:
    """What a footer on `screen` shows: each shown binding's key, words, action and state."""
    return tuple(
        (b.key, b.key_display, b.description, b.action, b.group, enabled, tooltip)
        for (_, b, enabled, tooltip) in screen.active_bindings.values()
        if b.show
    )


class KeyFooter(Footer):
    """A `Footer` that skips a recompose that would show the same keys."""

    #: the keys the footer's children were composed from (set in `compose`, which reads the
    #: screen's bindings when it runs, after a refresh: not when the change was announced)
    _shown: tuple | None = None

    def compose(self) -> ComposeResult:
        self._shown = shown_keys(self.screen) if self._bindings_ready else None
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if self._bindings_ready and screen is not screen.app.screen:
            return  # a view behind another: looked at again when it is back on screen
        if (
            screen.app.app_focus
            and self.is_attached
            and screen is self.screen
            and self.children
            and shown_keys(screen) == self._shown
        ):
            return  # the same keys are on screen already
        super().bindings_changed(screen)
