"""`fleetdeck silence`: "not now" for a host, a rule or a subject, for a while
(`backend/monitor/silences.py` says what a silence holds back and how it is kept).

    fleetdeck silence add [--host H] [--rule R] [--subject TEXT] --for 2h --comment TEXT [--json]
    fleetdeck silence list [--json]
    fleetdeck silence expire ID [--json]

Exit 0 done; 1 refused (a bound, an unknown or already ended id, an audit log that cannot be
written); 2 usage (no host, rule or subject, a duration that is not one, an unknown host).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions.audit import AuditError
from fleetdeck.backend.fleet.alert_rules import RULES
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.silence_model import Silence, SilenceRefused
from fleetdeck.backend.monitor.silences import (
    FOR_MAX,
    FOR_MIN,
    add_silence,
    expire_silence,
    load_silences,
)
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.cli.history import duration
from fleetdeck.show.fmt import host_text, message_text


def for_duration(text: str) -> float:
    """`--for`: the duration parser of `history --since` (90s, 30m, 2h, 7d), within a silence's
    bounds; argparse's type."""
    v = duration(text)
    if not FOR_MIN <= v <= FOR_MAX:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a silence's length: from {FOR_MIN / 60:g} minute to "
            f"{FOR_MAX / 86400:g} days"
        )
    return v


def register(sub: argparse._SubParsersAction) -> None:
    """Add `silence add`, `silence list` and `silence expire`."""
    p = sub.add_parser(
        "silence",
        help="hold back alerts of a host, a rule or a subject for a while",
        description="A silence keeps matching alerts from the hooks for a while: they still "
        "show (marked) in `fleetdeck alerts` and the dashboard, and what it held is delivered "
        "when it ends unless it fired and resolved within it. A silence naming only a host is "
        "that host's maintenance window. Every change is audited.",
    )
    acts = p.add_subparsers(dest="silence_action", metavar="ACTION", required=True)
    a = acts.add_parser(
        "add",
        help="silence alerts for a while",
        description="Silence the alerts that match every one of --host, --rule and --subject "
        "given (at least one), from now for --for.",
    )
    add_hosts_option(a)
    a.add_argument(
        "--host", metavar="NAME", help="only this host's alerts (alone: a maintenance window)"
    )
    a.add_argument(
        "--rule",
        metavar="RULE",
        choices=RULES,
        help=f"only this rule's alerts ({', '.join(RULES)})",
    )
    a.add_argument(
        "--subject",
        metavar="TEXT",
        help="only alerts about this subject (a run path, a schedule id, "
        "a port...); exact, or a shell pattern with * ? [",
    )
    a.add_argument(
        "--for",
        dest="duration",
        type=for_duration,
        required=True,
        metavar="DURATION",
        help="how long: 90s, 30m, 2h, 7d (1 minute to 30 days)",
    )
    a.add_argument(
        "--comment", required=True, metavar="TEXT", help="why (shown beside every alert it holds)"
    )
    a.add_argument("--json", action="store_true", help="print the silence as JSON")
    a.set_defaults(func=cmd_add)
    ls = acts.add_parser(
        "list",
        help="silences in force and recently ended",
        description="Every silence in force, then those ended within the last week.",
    )
    add_hosts_option(ls)
    ls.add_argument("--json", action="store_true", help='print {"silences": [...]}')
    ls.set_defaults(func=cmd_list)
    e = acts.add_parser(
        "expire",
        help="end a silence now",
        description="End silence ID now: what it held back is delivered by the running watch.",
    )
    add_hosts_option(e)
    e.add_argument("silence_id", metavar="ID")
    e.add_argument("--json", action="store_true", help="print the silence as JSON")
    e.set_defaults(func=cmd_expire)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def said(s: Silence, verb: str) -> str:
    """One line for a silence added or expired."""
    return f"{verb} {s.id}: {s.scope} until {_when(s.ends)} by {shown(s.by)}: {shown(s.comment)}"


def _refused(e: Exception) -> int:
    msg = getattr(e, "message", None) or str(e)
    print(f"fleetdeck: {msg}", file=sys.stderr)
    return 1


def cmd_add(args: argparse.Namespace) -> int:
    """Add one silence; exit 0 when it is saved and audited."""
    if not (args.host or args.rule or args.subject):
        print(
            "fleetdeck: silence add: name --host, --rule or --subject (or more); a silence of everything "
            "would hide every alert of the fleet",
            file=sys.stderr,
        )
        return 2
    if args.host:
        load_fleet(getattr(args, "hosts", None)).host(
            args.host
        )  # ConfigError (exit 2) for a host it does not name
    warn = lambda w: print(f"fleetdeck: warning: {w}", file=sys.stderr)  # noqa: E731
    try:
        s = add_silence(
            host=args.host,
            rule=args.rule,
            subject=args.subject,
            duration=args.duration,
            comment=args.comment,
            warn=warn,
        )
    except (SilenceRefused, AuditError) as e:
        return _refused(e)
    print(json.dumps(s.to_json(time.time())) if args.json else said(s, "silenced"))
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    """End one silence now; exit 1 for an unknown id or one already ended."""
    warn = lambda w: print(f"fleetdeck: warning: {w}", file=sys.stderr)  # noqa: E731
    try:
        s = expire_silence(args.silence_id, warn=warn)
    except (SilenceRefused, AuditError) as e:
        return _refused(e)
    print(json.dumps(s.to_json(time.time())) if args.json else said(s, "expired"))
    return 0


def silences_table(silences: list[Silence], now: float) -> Table:
    """The silences as a table: id, state, what, until, by, why."""
    t = Table(title=f"Silences: {sum(s.active(now) for s in silences)} in force")
    for col in ("id", "state", "silences", "until", "by", "comment"):
        t.add_column(col, overflow="fold", no_wrap=col == "id")
    for s in silences:
        state = s.state(now)
        t.add_row(
            Text(s.id),
            Text(state, style="yellow" if state == "active" else "dim"),
            host_text(s.scope),
            Text(_when(s.ends)),
            host_text(s.by),
            message_text(s.comment),
        )
    return t


def in_order(silences: list[Silence], now: float) -> list[Silence]:
    """Those in force first (the soonest to end first), then the ended (the newest first)."""
    return sorted(
        silences, key=lambda s: (not s.active(now), -s.ends if not s.active(now) else s.ends)
    )


def silences_doc(silences: list[Silence], now: float) -> dict:
    """`silence list --json`."""
    return {"silences": [s.to_json(now) for s in silences]}


def cmd_list(args: argparse.Namespace) -> int:
    """Print the silences in force, then the recently ended, newest end first; exit 0."""
    silences, warnings = load_silences()
    for w in warnings:
        print(f"fleetdeck: warning: {w}", file=sys.stderr)
    now = time.time()
    silences = in_order(silences, now)
    if args.json:
        print(json.dumps(silences_doc(silences, now), indent=1))
        return 0
    if not silences:
        print("no silences")
        return 0
    Console(soft_wrap=False).print(silences_table(silences, now))
    return 0
