"""`fleetdeck audit`: the append-only log of every action, newest first."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend import state

RESULT_STYLES = {"done": "green", "verified": "green", "refused": "yellow", "failed": "bold red",
                 "started": "cyan"}
# fields every record has; the summary is built from the others
_COMMON = {"time", "ts", "user", "controller", "host", "action", "result"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add `audit [--json]` to the command line."""
    from fleetdeck.tui.cli import add_hosts_option

    p = sub.add_parser("audit", help="the log of every action taken, newest first",
                       description="Show the audit log kept under the state dir: one record per action "
                       "attempt (intent and result), refused or done.")
    add_hosts_option(p)
    p.add_argument("--json", action="store_true", help='print {"entries": [...]}, newest first')
    p.add_argument("--limit", type=int, metavar="N", help="only the N newest entries")
    p.set_defaults(func=cmd_audit)


def entries(limit: int | None = None) -> list[dict[str, Any]]:
    """Audit records newest first (a torn last line from a crash is skipped)."""
    recs = [r for r in state.read_audit() if isinstance(r, dict)]
    recs.reverse()
    return recs[:limit] if limit is not None and limit >= 0 else recs


def cmd_audit(args: argparse.Namespace) -> int:
    """Print the audit log as a table or as JSON; always exit 0."""
    recs = entries(args.limit)
    if args.json:
        print(json.dumps({"entries": recs}, ensure_ascii=False, default=str))
        return 0
    if not recs:
        Console().print(Text(f"the audit log is empty ({state.audit_path()})"))
        return 0
    t = Table(header_style="bold")
    for col in ("time", "user", "host", "action", "result", "summary"):
        t.add_column(col, overflow="fold")
    for r in recs:
        result = str(r.get("result", ""))
        t.add_row(*(Text(_shown(r.get(k))) for k in ("time", "user", "host", "action")),
                  Text(result, style=RESULT_STYLES.get(result, "")), Text(_shown(summary(r))))
    Console(soft_wrap=False).print(t)
    return 0


def summary(r: dict[str, Any], limit: int = 160) -> str:
    """One short line saying what the record is about (target, reason, outcome)."""
    parts: list[str] = []
    sched = r.get("schedule")
    if isinstance(sched, dict):
        parts.append(" ".join(str(sched[k]) for k in ("kind", "id") if sched.get(k)))
        if sched.get("command"):
            parts.append(repr(sched["command"])[:60])
    for key in ("paths", "ids"):
        v = r.get(key)
        if isinstance(v, list) and v:
            items = [x.get("path", x) if isinstance(x, dict) else x for x in v]
            parts.append(", ".join(str(x) for x in items[:3]) + (f" (+{len(items) - 3})" if len(items) > 3 else ""))
    for key in ("src", "dst", "run", "path"):
        if isinstance(r.get(key), str):
            parts.append(f"{key} {r[key]}")
    if r.get("reason_code"):
        parts.append(f"[{r['reason_code']}]")
    if r.get("message"):
        parts.append(str(r["message"]))
    elif r.get("reason"):
        parts.append(str(r["reason"]))
    if r.get("backup"):
        parts.append(f"backup {r['backup']}")
    if not parts:
        rest = {k: v for k, v in r.items() if k not in _COMMON}
        parts.append(json.dumps(rest, default=str, ensure_ascii=False))
    text = "; ".join(p for p in parts if p)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(v: Any) -> str:
    s = "" if v is None else str(v)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
