"""The fleetdeck dashboard: one poll worker feeding `FleetPolled` into views and action modals."""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App, SystemCommand
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker

from fleetdeck.backend.fleet.config import ConfigError, Fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.show.fmt import said
from fleetdeck.tui import settings
from fleetdeck.tui.alert_watch import AlertWatch
from fleetdeck.tui.app_api import Dashboard
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.keys import APP_BINDINGS
from fleetdeck.tui.messages import ActionFinished, FleetPolled, PollFailed
from fleetdeck.tui.modals.dialogs import ErrorModal, HelpScreen
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.navigation import Navigation
from fleetdeck.tui.sources import Source
from fleetdeck.tui.view_registry import VIEWS, View
from fleetdeck.tui.views.alerts import AlertsScreen
from fleetdeck.tui.views.audit import AuditScreen
from fleetdeck.tui.views.base import ViewScreen
from fleetdeck.tui.views.fleet import FleetScreen
from fleetdeck.tui.views.history import HistoryScreen
from fleetdeck.tui.views.host import HostScreen
from fleetdeck.tui.views.proposals import ProposalsScreen
from fleetdeck.tui.views.runs import CheckpointTable, RunsScreen
from fleetdeck.tui.views.schedules import SchedulesScreen
from fleetdeck.tui.widgets.guard import GuardedPump
from fleetdeck.tui.widgets.log_pane import LogPane

# Failures an operator can act on: shown as a toast naming what and why, never a traceback.
EXPECTED = (HostError, ConfigError, OSError, ValueError, TimeoutError)

RESTART = (
    "fleetdeck's own files changed on disk while the dashboard was running (reinstalled or "
    "upgraded?), so part of it can no longer be loaded. Quit with q and start fleetdeck "
    "again; polling and the views already open keep working until then.\n\n"
)

# The views, registered where they are known: navigation and help look them up by name
# (tui/view_registry.py), so that neither imports a view. In the order help lists their keys.
for _view in (
    View("fleet", FleetScreen, help=(("Fleet view", (FleetScreen,)),)),
    View("host", HostScreen, mode=False, help=(("Host view", (HostScreen,)),)),
    View(
        "runs",
        RunsScreen,
        help=(
            ("Runs view", (RunsScreen, CheckpointTable)),
            ("train.log pane (Runs view; tab moves into it)", (LogPane,)),
        ),
    ),
    View("schedules", SchedulesScreen, help=(("Schedules view", (SchedulesScreen,)),)),
    View("audit", AuditScreen),
    View("history", HistoryScreen, help=(("History view", (HistoryScreen,)),)),
    View("alerts", AlertsScreen, help=(("Alerts view", (AlertsScreen,)),)),
    View("proposals", ProposalsScreen),
):
    VIEWS.register(_view)


class FleetdeckApp(Navigation, GuardedPump, App):
    """The dashboard. `source` defaults to a `Poller` over `fleet`; `clock` is injectable."""

    CSS_PATH = "fleetdeck.tcss"
    TITLE = "fleetdeck"
    MODES = VIEWS.modes()
    DEFAULT_MODE = "fleet"
    BINDINGS = [*APP_BINDINGS]

    def __init__(
        self,
        fleet: Fleet,
        source: Source | None = None,
        *,
        autopoll: bool = True,
        clock: Callable[[], float] = time.time,
        poll_interval: float | None = None,
    ) -> None:
        super().__init__()
        self.fleet = fleet
        self.clock = clock
        self.interval = poll_interval or fleet.poll_interval
        self.state = FleetState([h.name for h in fleet.hosts], self.interval, clock)
        self._owns_source = source is None
        if source is None:
            # a silent host must not hold back the others' refresh: a poll returns within half
            # an interval, and a host still asking answers into a later poll (see Poller.poll)
            source = Poller(fleet, deadline=max(1.0, self.interval / 2))
        self.source = source
        #: the monitor in its observing role: alert rules judged on every live poll, history
        #: written, no hook delivered (a recorded replay is not judged)
        self.alert_watch = AlertWatch(self, enabled=self._owns_source)
        self.autopoll = autopoll
        self._poll_timer: Timer | None = None
        #: set when the dashboard starts closing: no poll starts from then on
        self._quitting = False
        self._links: dict[str, HostLink] = {}
        #: set once mounted: from then on an error in a handler opens the error window
        self.guard_errors = False
        #: the remembered sort, filter and theme ($XDG_CONFIG_HOME/fleetdeck/settings.toml)
        self.settings = settings.load()
        #: the views `esc` goes back through, the latest last
        self._history: list[str] = []
        #: what was typed in a confirmation closed with esc, by what it confirms (typed_confirm)
        self.typed_memory: dict[tuple, dict[str, str]] = {}
        n = len(fleet.hosts)
        self.sub_title = f"{n} host{'' if n == 1 else 's'} from {fleet.source}"

    # -- polling: one exclusive worker, the next poll scheduled when one ends ---------------
    def on_mount(self) -> None:
        if self.settings.problem is not None:
            self.notify(
                said(
                    f"{self.settings.problem}. Using the defaults; choices are not saved until the file is "
                    "fixed or removed."
                ),
                title="Settings",
                severity="warning",
                timeout=12,
                markup=False,
            )
        elif self.settings.theme is not None:
            if self.settings.theme in self.available_themes:
                self.theme = self.settings.theme
            else:
                self.notify(
                    said(
                        f"{self.settings.path}: no theme named {self.settings.theme!r}; using the default."
                    ),
                    title="Settings",
                    severity="warning",
                    markup=False,
                )
        self.set_interval(1.0, self._tick)
        if self.autopoll:
            self.poll_fleet()
        self.guard_errors = True

    def poll_fleet(self) -> Worker | None:
        """Ask every host once (a worker) and post `FleetPolled`; then schedule the next poll.
        Nothing once the dashboard is closing: a poll queued before the quit (a timer, a
        callback flushed by the unmount) would start after the poller closed, with nobody to
        end it."""
        if self._quitting or not self.is_running:
            return None
        return self._poll_worker()

    @work(exclusive=True, group="poll", exit_on_error=False)
    async def _poll_worker(self) -> None:
        try:
            snap = await self.source.poll()
        except Exception as e:  # a poller bug must not stop polling
            self.post_message(PollFailed(f"{type(e).__name__}: {e}"))
        else:
            self.post_message(FleetPolled(snap))
        finally:
            if self.autopoll and self.is_running:
                if self._poll_timer is not None:
                    self._poll_timer.stop()
                self._poll_timer = self.set_timer(self.interval, self.poll_fleet)

    def on_fleet_polled(self, message: FleetPolled) -> None:
        if self.alert_watch.enabled:  # one down-since record: the monitor's, saved with its alerts
            self.state.down_since = self.alert_watch.monitor.down_since_table
        self.state.apply(message.snapshot)
        self.alert_watch.observe(message.snapshot)
        self.refresh_views()
        self.start_building_ahead()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(said(message.error), title="Poll failed", severity="error", markup=False)

    def on_action_finished(self, message: ActionFinished) -> None:
        self.notify(
            said(message.summary),
            title=said(message.action.capitalize()),
            markup=False,
            severity="information" if message.ok else "warning",
            timeout=8,
        )
        self.refresh_views()
        self.action_poll_now()

    def refresh_views(self, tick: bool = False) -> None:
        """Redraw the view on screen, the topmost of the current stack (modals on top are left
        alone, and a view under it, such as the Fleet view under a Host view, is hidden: it
        catches up when shown again, `ViewScreen.on_screen_resume`); on a clock `tick` only
        what moves with the clock, and only in a view that shows ages.

        A drawing bug must not take the dashboard down: it is shown once in the error modal.
        """
        screen = next((s for s in reversed(self.screen_stack) if isinstance(s, ViewScreen)), None)
        if screen is None or not screen.ready or (tick and not screen.SHOWS_AGES):
            return
        try:
            if tick:
                screen.refresh_clock()
            else:
                screen.refresh_view()
        except Exception as e:
            if not any(isinstance(s, ErrorModal) for s in self.screen_stack):
                self.report_error(f"redrawing {type(screen).__name__}", e)

    def _tick(self) -> None:
        # ages and stale badges move with the clock even when no poll arrives
        if self.state.polls:
            self.refresh_views(tick=True)

    async def on_unmount(self) -> None:
        self._quitting = True
        try:
            # the views froze what they hold (ViewScreen.on_mount): hand it back to the
            # collector, so that an app ended in a longer-lived process (the tests) leaves no
            # cycles behind
            gc.unfreeze()
            self.alert_watch.close()
        finally:
            # bounded (Poller.close): a silent host does not hold the quit
            if self._owns_source and hasattr(self.source, "close"):
                await self.source.close()
            for link in self._links.values():
                await link.close()

    # -- links and errors -------------------------------------------------------------------
    def link(self, host: str) -> HostLink:
        """The poller's link to `host` (a new local/SSH link when the source has none)."""
        if hasattr(self.source, "link"):
            return self.source.link(host)
        if host not in self._links:
            self._links[host] = HostLink(self.fleet.host(host))
        return self._links[host]

    def report_error(self, what: str, error: BaseException) -> None:
        """Expected failures become a toast naming what and why; others an error modal."""
        if isinstance(error, EXPECTED):
            why = getattr(error, "message", None) or str(error) or type(error).__name__
            self.notify(
                said(f"{what}: {why}"),
                title=said(f"{what} failed"),
                severity="error",
                timeout=10,
                markup=False,
            )
        else:
            self.show_unexpected(what, error)

    def show_unexpected(self, what: str, error: BaseException) -> None:
        """Open the error window for a bug; the dashboard keeps running.

        One window at a time: a drawing bug that repeats every second must not stack them.
        An ImportError means the installed package changed underneath the running app.
        """
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.log.error(f"{what}: {text}")
        if isinstance(error, ImportError):
            what, text = f"{what} (restart fleetdeck)", RESTART + text
        if any(isinstance(s, ErrorModal) for s in self.screen_stack):
            return
        self.push_screen(ErrorModal(what, text))

    def _handle_exception(self, error: Exception) -> None:
        # Textual ends the app on any error that escapes a timer, callback or worker; once the
        # dashboard is up such an error is shown in the error window instead.
        if self.guard_errors and self.is_running and self.screen_stack:
            self.show_unexpected("a background task", error)
            return
        super()._handle_exception(error)

    # -- actions ---------------------------------------------------------------------------
    def action_poll_now(self) -> None:
        """Poll at once instead of waiting for the interval."""
        self.poll_fleet()

    def action_toggle_theme(self) -> None:
        """Switch between the light and dark themes (remembered in settings.toml)."""
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def watch_theme(self, theme: str) -> None:
        # the palette's theme picker too: whichever way it changed, it is remembered
        if getattr(self, "guard_errors", False):
            try:
                self.settings.set_theme(theme)
            except OSError as e:
                self.notify(
                    f"Settings not saved: {e}", title="Settings", severity="warning", markup=False
                )

    def action_help(self) -> None:
        """Show every key."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.BINDINGS))

    def action_launch(self, host: str | None = None) -> None:
        """Open the Launch modal."""
        self.push_screen(LaunchModal(host))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette offers every action of every view."""
        yield from super().get_system_commands(screen)
        views = [
            ("Fleet view", "fleet"),
            ("Runs view", "runs"),
            ("Schedules view", "schedules"),
            ("Audit view", "audit"),
            ("Alerts view", "alerts"),
        ]
        for title, mode in views:
            yield SystemCommand(title, f"Show the {title}", lambda m=mode: self.action_view(m))
        for name in self.state.host_names:
            yield SystemCommand(
                f"Host {name}", f"Open the Host view of {name}", lambda n=name: self.open_host(n)
            )
        yield SystemCommand("Poll now", "Ask every host at once", self.action_poll_now)
        yield SystemCommand("Toggle light/dark theme", "Switch theme", self.action_toggle_theme)
        yield SystemCommand(
            "Launch a run", "Pre-flight and start a RUN.toml on a host", self.action_launch
        )
        yield SystemCommand(
            "Purge checkpoints",
            "Runs view: purge the marked checkpoints",
            lambda: self._on_view("runs", "purge"),
        )
        yield SystemCommand(
            "Mirror adapter",
            "Runs view: copy the selected run's adapter and verify",
            lambda: self._on_view("runs", "mirror"),
        )
        yield SystemCommand(
            "Acknowledge schedule",
            "Schedules view: mark the selected schedule known",
            lambda: self._on_view("schedules", "acknowledge"),
        )
        yield SystemCommand(
            "Remove schedule",
            "Schedules view: remove the selected schedule",
            lambda: self._on_view("schedules", "remove"),
        )
        yield SystemCommand("Help", "Every key", self.action_help)


if TYPE_CHECKING:
    # the app is what its views are typed against (tui/app_api.py): the type checker holds it here
    _is_a_dashboard: type[Dashboard] = FleetdeckApp


def run_dashboard(fleet: Fleet, **kw: Any) -> int:
    """Run the dashboard in this terminal until the operator quits; returns the exit status."""
    FleetdeckApp(fleet, **kw).run()
    return 0


__all__ = ["FleetdeckApp", "run_dashboard"]
