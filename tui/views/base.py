"""The base class every view screen shares (the fleet state it reads: `tui/fleet_state.py`)."""

from __future__ import annotations

import gc

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Header, Static

from fleetdeck.tui.app_api import DashboardApp
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.widgets.guard import GuardedPump
from fleetdeck.tui.widgets.key_footer import KeyFooter


class ViewScreen(GuardedPump, Screen):
    """A top-level view: header, body, footer; redrawn from `FleetState` after each poll."""

    app: DashboardApp

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield from self.compose_body()
        # the palette hint and the less used keys live in the help screen (?), so that q Quit
        # still shows at 100 columns
        yield KeyFooter(compact=True, show_command_palette=False)

    def compose_body(self) -> ComposeResult:
        """The view's own widgets."""
        yield from ()

    ready = False
    #: redrawn every second too (down-for and stale badges move with the clock)
    SHOWS_AGES = False
    #: the Alerts view: the header's alert badge leaves out the key that shows it
    SHOWS_ALERTS = False

    def refresh_view(self) -> None:
        """Redraw from `self.app.state`; cheap and idempotent (tables update in place)."""

    def refresh_clock(self) -> None:
        """Redraw what moves with the clock (ages, down-for, stale badges): called once a
        second on the view on screen when `SHOWS_AGES`; by default the whole view."""
        self.refresh_view()

    def on_mount(self) -> None:
        # a poll can arrive between compose and mount: redraw only once the widgets exist
        self.ready = True
        self.refresh_view()
        if type(self) in getattr(self.app, "MODES", {}).values():
            # a top-level view lives as long as the app: its widgets and rows (10,000 schedules)
            # leave the cycle collector's generations, whose full passes over them were the
            # longest pauses of a big fleet's dashboard; what they drop is still freed by
            # reference counting
            gc.freeze()

    def on_screen_resume(self) -> None:
        if self.ready:
            self.refresh_view()
        watch = getattr(self.app, "alert_watch", None)
        if watch is not None:
            watch.show_badge()  # the badge names its key everywhere but on the Alerts view
            watch.flush_toasts()  # a pop-up just closed: the toasts it held back

    @property
    def state(self) -> FleetState:
        """The app's fleet state."""
        return self.app.state


def show_text(widget: Static, content: Text | str) -> None:
    """`widget.update(content)` unless it already shows that very text: an update lays the
    whole screen out again, and a poll or a clock tick mostly leaves a detail line as it was."""
    # Text's == compares the characters and spans only: the text's own style counts too
    key = (
        (
            content.plain,
            tuple(content.spans),
            str(content.style),
            content.justify,
            content.overflow,
            content.no_wrap,
        )
        if isinstance(content, Text)
        else content
    )
    if getattr(widget, "_fleetdeck_shown", None) == key:
        return
    widget._fleetdeck_shown = key  # type: ignore[attr-defined]
    # a text of as many lines as before, none of them wrapped, takes the same height: the
    # widget alone is redrawn (a run's title as the cursor moves through 3,000 runs)
    lines = (content.plain if isinstance(content, Text) else content).split("\n")
    width = widget.content_size.width
    shape = (len(lines), width) if width and all(cell_len(line) < width for line in lines) else None
    same = shape is not None and getattr(widget, "_fleetdeck_shape", None) == shape
    widget._fleetdeck_shape = shape  # type: ignore[attr-defined]
    widget.update(content, layout=not same)
