"""`fleetdeck alerts`: what fires now, judged on a fresh poll with the watcher's saved state."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import Silence
from fleetdeck.backend.monitor.silences import SilenceStore
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.cli.watch import Watcher
from fleetdeck.show.fmt import alerts_title, host_text, message_text, severity_text, since_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add `alerts [--json]`."""
    p = sub.add_parser(
        "alerts",
        help="alerts firing now and recently resolved",
        description="Poll the fleet once and judge every alert rule, carrying on from "
        "the state `fleetdeck watch` keeps and the alert starts the history records (so "
        "`since` is the dashboard's and watch's, and durations hold). Nothing is "
        "delivered and nothing is saved: hooks are `watch`'s job. Exits 0 whether or not "
        "alerts fire.",
    )
    add_hosts_option(p)
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"alerts": [...]}; a silenced alert has '
        '"silenced": {"id", "by", "until", "comment"} (null otherwise)',
    )
    p.set_defaults(func=cmd_alerts)


async def judged_alerts(fleet) -> list[Alert]:
    """Firing alerts, then recently resolved ones, after one fresh poll (read-only)."""
    w = Watcher(fleet, out=io.StringIO(), readonly=True)
    await w.run(count=1)
    return w.engine.alerts()


def current_alerts(fleet) -> list[Alert]:
    """`judged_alerts`, from outside an event loop."""
    return asyncio.run(judged_alerts(fleet))


def held_by(alerts: list[Alert], store: SilenceStore, now: float) -> dict[str, Silence]:
    """The silence holding each firing alert that one holds, by the alert's key."""
    return {a.key: s for a in alerts if a.state == "firing" and (s := store.of(a, now)) is not None}


def alerts_doc(alerts: list[Alert], held: dict[str, Silence]) -> dict:
    """`alerts --json`: each alert, and the silence over it where one holds it."""
    return {
        "alerts": [
            dict(
                a.to_json(),
                silenced=silenced_json(held.get(a.key) if a.state == "firing" else None),
            )
            for a in alerts
        ]
    }


def silenced_json(s: Silence | None) -> dict | None:
    """What `alerts --json` says of the silence over an alert."""
    return None if s is None else {"id": s.id, "by": s.by, "until": s.ends, "comment": s.comment}


def cmd_alerts(args: argparse.Namespace) -> int:
    """Print the alerts as a table or JSON; exit 0 either way. A firing alert a silence holds
    is listed all the same, marked with who made the silence and until when."""
    alerts = current_alerts(load_fleet(args.hosts))
    store = SilenceStore(warn=lambda w: print(f"fleetdeck: warning: {w}", file=sys.stderr))
    store.refresh()
    now = time.time()
    held = held_by(alerts, store, now)
    if args.json:
        print(json.dumps(alerts_doc(alerts, held), indent=1))
        return 0
    if not alerts:
        print("no alerts")
        return 0
    t = Table(title=alerts_title(alerts) + (f" ({len(held)} silenced)" if held else ""))
    for col in ("state", "severity", "rule", "host", "subject", "since", "text"):
        t.add_column(col, overflow="fold")
    for a in alerts:  # firing by severity, then newest first; then the resolved, newest first
        s = held.get(a.key) if a.state == "firing" else None
        state = (
            Text("silenced", style="yellow")
            if s
            else Text(a.state, style="bold red" if a.state == "firing" else "green")
        )
        # the subject is a host's value (a run's path, a schedule's id); the text is a sentence
        # that quotes some host values raw and some already escaped, so it is `said`, not `shown`
        text = message_text(a.text)
        if s is not None:
            text = message_text(
                f"silenced by {shown(s.by)} until "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(s.ends))} ({s.id}): {a.text}"
            )
        t.add_row(
            state,
            severity_text(a.severity if a.state == "firing" else ""),
            Text(a.rule),
            Text(a.host),
            host_text(a.subject),
            since_text(a.since, now),
            text,
        )
    Console(soft_wrap=False).print(t)
    return 0
