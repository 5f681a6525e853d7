"""`fleetdeck audit`: the append-only log of every action, newest first."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions import audit
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.cli.args import add_hosts_option, at_least_one
from fleetdeck.show.audit_text import describe

RESULT_STYLES = {
    "done": "green",
    "verified": "green",
    "refused": "yellow",
    "failed": "bold red",
    "unverified": "bold red",
    "started": "cyan",
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add `audit [--json] [--limit N] [--details]` to the command line."""
    p = sub.add_parser(
        "audit",
        help="the log of every action taken, newest first",
        description="Show the audit log kept under the state dir: one record per action "
        "attempt (intent and result), refused or done.",
    )
    add_hosts_option(p)
    p.add_argument("--json", action="store_true", help='print {"entries": [...]}, newest first')
    p.add_argument(
        "--limit", type=at_least_one, metavar="N", help="only the N newest entries (N >= 1)"
    )
    p.add_argument(
        "--details", action="store_true", help="every field of each record, one per line"
    )
    p.set_defaults(func=cmd_audit)


def entries(limit: int | None = None) -> list[dict[str, Any]]:
    """Audit records newest first (a torn line from a crash is skipped)."""
    recs = [r for r in audit.read_audit() if isinstance(r, dict)]
    recs.reverse()
    return recs[:limit] if limit is not None and limit >= 0 else recs


def cmd_audit(args: argparse.Namespace) -> int:
    """Print the audit log as a table (or each record in full) or as JSON; always exit 0.
    Paths are kept exact in the JSON (undecodable bytes as \\udcXX escapes) and shown
    escaped in text, so no byte in a path can break the output."""
    recs = entries(args.limit)
    if args.json:
        print(json.dumps({"entries": recs}, ensure_ascii=True, default=str))
        return 0
    console = Console(soft_wrap=False, highlight=False)
    if not recs:
        console.print(Text(f"the audit log is empty ({shown(str(audit.audit_path()))})"))
        return 0
    if args.details:
        for r in recs:
            head, lines = describe(r, size_short)
            result = str(r.get("result", ""))
            console.print(
                Text.assemble(
                    (
                        f"{_cell(r.get('time'))} {_cell(r.get('action'))} on "
                        f"{_cell(r.get('host'))} by {_cell(r.get('user'))}: ",
                        "bold",
                    ),
                    (shown(result), RESULT_STYLES.get(result, "")),
                )
            )
            # whole lines: a path cut by a wrap would read as two
            console.print(Text(f"  {head}"), soft_wrap=True)
            for line in lines:
                console.print(Text(f"    {line}"), soft_wrap=True)
        return 0
    t = Table(header_style="bold")
    for col in ("time", "user", "host", "action", "result", "summary"):
        t.add_column(col, overflow="fold")
    for r in recs:
        result = str(r.get("result", ""))
        t.add_row(
            *(Text(_cell(r.get(k))) for k in ("time", "user", "host", "action")),
            Text(shown(result), style=RESULT_STYLES.get(result, "")),
            Text(summary(r)),
        )
    console.print(t)
    return 0


def summary(r: dict[str, Any], limit: int = 160) -> str:
    """One short line saying what the record is about (target, reason, outcome), escaped."""
    text = describe(r, size_short)[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell(v: Any) -> str:
    return "-" if v is None else shown(str(v))
