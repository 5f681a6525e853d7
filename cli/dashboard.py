"""`fleetdeck tui` (and `fleetdeck` with no command): the dashboard."""

from __future__ import annotations

import argparse

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.cli.args import add_hosts_option


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `tui` subcommand."""
    p = sub.add_parser("tui", help="the dashboard (also: fleetdeck with no command)")
    add_hosts_option(p)
    p.add_argument("--light", action="store_true", help="start in the light theme")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the fleet file and run the dashboard until `q`."""
    fleet = load_fleet(getattr(args, "hosts", None))
    # deferred: tui.app and textual (the CLI never loads textual; only this command starts the app)
    from fleetdeck.tui.app import FleetdeckApp

    app = FleetdeckApp(fleet)
    if getattr(args, "light", False):
        app.theme = "textual-light"
    app.run()
    return 0
