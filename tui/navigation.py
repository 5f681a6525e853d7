"""Moving between the dashboard's views: the number keys (`action_view`), `esc` back through
the views seen (`action_back`), the Host view of a host, and the `:` command line
(`run_command`). A mixin of `FleetdeckApp` (`tui/app.py`), which holds the modes and registers
the views: they are looked up in the registry (`tui/view_registry.py`), never imported here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.geometry import Region
from textual.screen import Screen
from textual.widgets import DataTable

from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.view_registry import VIEWS
from fleetdeck.tui.widgets.command_line import CommandLine

if TYPE_CHECKING:
    # what the mixin is mixed into, for the type checker: at run time it is a plain class
    _App = App[None]
else:
    _App = object

#: how many views `esc` can go back through
HISTORY = 50
#: the top-level views built ahead of their first switch (the ones a big fleet makes slow to
#: build: 3,000 runs, 10,000 schedules), in this order, one at a time while the app is idle
AHEAD = ("schedules", "runs")
#: the pause after a poll, and between two views built ahead, before the next is built
AHEAD_GAP_S = 0.3


class Navigation(_App):
    """The app's moves between views; `_history` is the views `esc` goes back through."""

    _history: list[str]
    state: FleetState
    action_help: Callable[[], None]
    _quitting: bool
    #: the views built ahead so far (`build_ahead`), by mode
    built_ahead: tuple[str, ...] = ()
    #: what is left to do ahead: (step, mode), the first one next
    _ahead: list[tuple[str, str]] | None = None

    def start_building_ahead(self) -> None:
        """After the first poll is drawn: build the views in `AHEAD` while the app waits for the
        operator, so that the first switch into one is a switch, not a build (compose, mount,
        styles, every row's key, the first drawing of its rows). Nothing on screen changes;
        the views are built with the fleet the poll brought, and a view not on screen is not
        redrawn on later polls (it catches up when shown, as any view left behind does)."""
        if self._ahead is None:
            self._ahead = [(step, m) for m in AHEAD for step in ("build", "lay out", "draw")]
            self.set_timer(AHEAD_GAP_S, self.build_ahead)

    def build_ahead(self) -> None:
        """One step of `start_building_ahead`, then the next `AHEAD_GAP_S` later: build a view
        hidden (as Textual's first `switch_mode` into it would, less the resume: it is not
        shown), lay it out at the app's size, or draw its tables' lines on screen once (kept in
        their caches). A view already shown meanwhile is left as it is."""
        todo = self._ahead
        if not todo or self._quitting or not self.is_running:
            return
        step, mode = todo.pop(0)
        # Textual (pinned) keeps each mode's screens in `_screen_stacks`; `switch_mode` finds
        # the view there and only resumes it (tests/tui/test_build_ahead.py holds it to that)
        stacks = self._screen_stacks
        if step == "build" and mode not in stacks:
            screen = VIEWS.screen(mode)()
            self._load_screen_css(screen)
            self._get_screen(screen)  # registered: it composes and mounts in its own task
            stacks[mode] = [screen]
            # styled as it mounts, from the stylesheet as it is now: the switch need not
            # restyle every screen again (a theme changed since moves the app's count: it does)
            screen._css_update_count = self._css_update_count
            if self.screen._css_update_count != self._css_update_count:
                # the pass Textual's first switch makes (`_init_mode`), which marks the view on
                # screen styled too: done now, not when the operator next goes back to it
                self.refresh_css(animate=False)
            self.built_ahead = (*self.built_ahead, mode)
        elif step != "build" and mode in self.built_ahead:
            screen = stacks[mode][0]
            if not screen.is_mounted:
                todo.insert(0, (step, mode))  # a busy machine: not mounted yet
            elif not screen.is_current and not screen.stack_updates:  # never shown yet
                if step == "lay out":
                    screen._refresh_layout(self.size)  # each widget's size, as the switch's
                else:
                    for table in screen.query(DataTable):
                        table.render_lines(Region(0, 0, *table.size))
        self.set_timer(AHEAD_GAP_S, self.build_ahead)

    def action_view(self, mode: str) -> None:
        """Switch to one of the top-level views (from the Host view, its own key closes it)."""
        if self.current_mode != mode:
            self._history = (self._history + [self.current_mode])[-HISTORY:]
            self.switch_mode(mode)
        elif VIEWS.shows(self.screen, "host"):
            self.pop_screen()
        self.refresh_bindings()

    def view_name(self, screen: Screen) -> str:
        """The name a view's remembered choices are saved under (its mode, or `host`)."""
        name = VIEWS.name_of(screen)
        return name or type(screen).__name__.removesuffix("Screen").casefold()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The view on screen leaves its own key out of the footer (pressing it does nothing),
        so the footer keeps every other view and `q Quit` within 80 columns."""
        if (
            action == "view"
            and parameters
            and parameters[0] == self.current_mode
            and not VIEWS.shows(self.screen, "host")
        ):
            return False
        return True

    def open_host(self, name: str) -> None:
        """Push the Host view for `name`."""
        self.push_screen(VIEWS.screen("host")(name))

    async def action_back(self) -> None:
        """Esc: close the Host view, else go back to the view before this one (Runs -> Alerts
        -> esc is Runs again), at the first one to the Fleet view."""
        if VIEWS.shows(self.screen, "host"):
            self.pop_screen()
        elif VIEWS.is_view(self.screen):
            while self._history and self._history[-1] == self.current_mode:
                self._history.pop()
            if self._history:
                self.switch_mode(self._history.pop())
            elif self.current_mode != "fleet":
                self.switch_mode("fleet")
        self.refresh_bindings()

    def action_command_line(self) -> None:
        """Open the `:` command line."""
        if not isinstance(self.screen, CommandLine):
            self.push_screen(CommandLine(self.state.host_names), self.run_command)

    def run_command(self, cmd: Any) -> None:
        """Go where a command line named: a view (for one host, where the view takes one), a
        Host view, help or quit."""
        if cmd is None:
            return
        if cmd.view == "quit":
            self.exit()
            return
        if cmd.view == "help":
            self.action_help()
            return
        if cmd.view == "host" or (cmd.view == "fleet" and cmd.host):
            if VIEWS.shows(self.screen, "host"):
                self.pop_screen()
            self.open_host(cmd.host)
            return
        if VIEWS.shows(self.screen, "host"):
            self.pop_screen()
        self.action_view(cmd.view)

        def scope() -> None:
            screen = self.screen
            if hasattr(screen, "scope_host"):
                screen.scope_host(cmd.host)
            elif cmd.host:
                self.notify(
                    f"The {cmd.view.capitalize()} view shows every host; :host {cmd.host} opens one.",
                    title="Command",
                    severity="warning",
                    markup=False,
                )

        self.call_after_refresh(scope)

    def _on_view(self, mode: str, action: str) -> None:
        self.action_view(mode)
        self.call_after_refresh(self._screen_action, action)

    async def _screen_action(self, action: str) -> None:
        # the view's own action, once the mode switch has put that view on screen
        await self.screen.run_action(action)
