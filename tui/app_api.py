"""What a view and the pop-ups it opens ask of the dashboard beyond Textual's `App`: the
`Dashboard` protocol. `FleetdeckApp` (`tui/app.py`) is one; the views are typed against this
module, never against `tui/app.py`, which imports them (so no circle of imports runs through
the app, even counting those made for the type checker only).

Types only: nothing here runs, and this module imports no view and not the app."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from textual.app import App

from fleetdeck.backend.fleet.config import Fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.tui.alert_watch import AlertWatch
from fleetdeck.tui.fleet_state import FleetState


class Dashboard(Protocol):
    """The dashboard's own members that views and pop-ups use."""

    #: the fleet as configured (hosts, their run roots, the alert rules)
    fleet: Fleet
    #: what the last polls said, as the views draw it
    state: FleetState
    #: the time the views show ages against (a fixed one in tests)
    clock: Callable[[], float]
    #: the monitor in its observing role: alerts, silences, history
    alert_watch: AlertWatch
    #: what was typed in a confirmation closed with esc, by what it confirms
    typed_memory: dict[tuple[Any, ...], dict[str, str]]

    def link(self, host: str) -> HostLink:
        """The link that runs helpers on `host`."""
        ...

    def report_error(self, what: str, error: BaseException) -> None:
        """A toast for an expected failure, the error window for a bug."""
        ...

    def open_host(self, name: str) -> None:
        """Push the Host view of `name`."""
        ...


if TYPE_CHECKING:

    class DashboardApp(App[None], Dashboard):
        """The type of a view's `self.app`: Textual's App and the `Dashboard` members (an
        intersection, which Python's typing cannot spell otherwise)."""

else:
    DashboardApp = App
