"""`fleetdeck schedules`: list every schedule and loop, acknowledge known ones, remove one.

The parser and the listing are here; acknowledging is in `schedule_ack`, removing in
`schedule_remove`, the poll they share in `schedule_poll`."""

from __future__ import annotations

import argparse
import json
import sys

from rich.cells import cell_len
from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions.schedules import (
    DEFAULT_GRACE,
)
from fleetdeck.backend.fleet import schedule_verdict
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.models import Schedule, schedule_json, unreachable_json
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option, seconds_type
from fleetdeck.cli.schedule_ack import cmd_ack
from fleetdeck.cli.schedule_poll import host_names, poll, sentence, unreachable
from fleetdeck.cli.schedule_remove import cmd_remove
from fleetdeck.cli.tables import WHOLE, listing_console
from fleetdeck.show.fmt import matches


def register(sub: argparse._SubParsersAction) -> None:
    """Add `schedules`, `schedules ack` and `schedules remove` to the command line."""
    p = sub.add_parser(
        "schedules",
        help="cron entries, timers, at jobs and loops on every host",
        description="List every crontab entry, cron file line, systemd timer, at job and "
        "shell loop on the fleet; stray ones (unacknowledged, duplicated, or naming a "
        "missing path) are flagged.",
    )

    def listing(q: argparse.ArgumentParser) -> None:
        """The listing's options, on `schedules` and on `schedules list` alike."""
        add_hosts_option(q)
        q.add_argument(
            "--host",
            action="append",
            dest="host_filter",
            metavar="NAME",
            help="only this host (repeatable)",
        )
        q.add_argument("--json", action="store_true", help='print {"schedules": [...]}')
        q.add_argument(
            "--filter", metavar="TEXT", help="only schedules whose row shows TEXT (any case)"
        )
        q.add_argument(
            "--stray-only", action="store_true", help="only the stray ones (what needs a look)"
        )
        q.add_argument(
            "--all",
            action="store_true",
            help="list the distribution's own cron entries one by one "
            "(the table folds them into one line per host)",
        )
        q.set_defaults(func=cmd_list)

    listing(p)
    acts = p.add_subparsers(dest="schedules_action", metavar="ACTION")
    listing(
        acts.add_parser(
            "list",
            help="list them (the same as plain `schedules`)",
            description="The same listing as plain `fleetdeck schedules`.",
        )
    )

    a = acts.add_parser(
        "ack",
        help="mark schedules as known (ids from a fresh listing)",
        description="Acknowledge schedules by id, on the host that lists them. An id "
        "listed on several hosts needs --host NAME, or --all-hosts to cover the same "
        "entry on every host (now and later). Acknowledging clears the "
        "'unacknowledged' and 'duplicate' reasons.",
    )
    add_hosts_option(a)
    a.add_argument("ids", nargs="*", metavar="ID")
    a.add_argument(
        "--host",
        action="append",
        dest="host_filter",
        metavar="NAME",
        help="acknowledge the id on this host (repeatable)",
    )
    a.add_argument("--all-hosts", action="store_true", help="acknowledge the id on every host")
    a.add_argument(
        "--all",
        action="store_true",
        dest="ack_all",
        help="with --host NAME and no ids: acknowledge every unacknowledged schedule the host "
        "lists now (a baseline; what turns up later is news)",
    )
    a.set_defaults(func=cmd_ack)

    r = acts.add_parser(
        "remove",
        help="remove one schedule or stop one loop",
        description="Remove one schedule by id. The id must be typed back exactly, "
        "with --confirm ID or at the terminal prompt.",
    )
    add_hosts_option(r)
    r.add_argument("target_host", metavar="HOST")
    r.add_argument("schedule_id", metavar="ID")
    r.add_argument("--confirm", metavar="ID", help="the id again, byte for byte")
    r.add_argument(
        "--grace",
        type=seconds_type("from 0 to 3600", lambda v: 0 <= v <= 3600),
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"loops: wait this long after SIGTERM before SIGKILL (default {DEFAULT_GRACE:g})",
    )
    r.add_argument("--json", action="store_true", help="print the removal report as JSON")
    r.set_defaults(func=cmd_remove)


# -- schedules ------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    """Print the schedules table (or JSON), what needs action first; exit 1 if a requested host
    could not be asked. The whole fleet is polled whatever `--host` says, so that the verdict
    (a duplicate on another host) is the same however the listing is narrowed."""
    fleet = load_fleet(args.hosts)
    wanted = host_names(fleet, args.host_filter)
    snap = poll(fleet, None)
    shown_hosts = set(wanted) if wanted else {h.name for h in snap.hosts}
    every = list(snap.schedules)
    rows = listed(every, shown_hosts, args.stray_only, args.filter)
    down = [d for d in unreachable(snap) if d[0] in shown_hosts]
    if args.json:
        print(json.dumps(schedules_doc(rows, every, down)))
    else:
        folded: dict[str, int] = {}
        if not args.all:
            for s in rows:
                if s.system:
                    folded[s.host] = folded.get(s.host, 0) + 1
            rows = [s for s in rows if not s.system]
        console = listing_console(soft_wrap=False)
        if not rows and (args.filter or args.stray_only):
            console.print(
                Text(
                    "no stray schedule" + (f" shows {args.filter!r}" if args.filter else "")
                    if args.stray_only
                    else f"no schedule's row shows {args.filter!r}"
                )
            )
        else:
            console.print(schedules_table(rows, every, width=console.width))
        for host, n in folded.items():
            console.print(
                Text(
                    f"{host}: {n} entr{'y' if n == 1 else 'ies'} the distribution installed, "
                    "folded (--all lists them)",
                    style="dim",
                )
            )
    for name, err, _ in down:
        print(f"fleetdeck: {name} is unreachable: {sentence(err)}", file=sys.stderr)
    return 1 if down else 0


def listed(
    every: list[Schedule], hosts: set[str], stray_only: bool, needle: str | None
) -> list[Schedule]:
    """The schedules of `hosts` a listing shows, stray first: with `stray_only` only the stray
    ones, with `needle` only those whose row shows it (`every`: the whole fleet's, for naming a
    duplicate on another host)."""
    return schedule_verdict.stray_first(
        s
        for s in every
        if s.host in hosts
        and (s.stray or not stray_only)
        and matches(
            needle,
            s.host,
            s.id,
            s.kind,
            s.user,
            s.spec,
            s.command,
            s.source,
            s.next_run,
            s.unit,
            " ".join(s.reasons),
            schedule_verdict.why(s, every) if s.stray else None,
        )
    )


def schedules_doc(
    rows: list[Schedule], every: list[Schedule], down: list[tuple[str, str, str | None]]
) -> dict:
    """`schedules --json`: each schedule with why it is stray, and the hosts not asked."""
    return {
        "schedules": [dict(schedule_json(s), why=schedule_verdict.why(s, every)) for s in rows],
        "unreachable": [unreachable_json(*d) for d in down],
    }


#: below this many columns a table of nine columns beside a 34-character id is shreds: each
#: schedule is printed as a short record instead
RECORDS_BELOW = 120


def _flag(s: Schedule) -> Text:
    if s.system:
        return Text("system", style="dim")
    if s.stray:
        return Text("STRAY " + ", ".join(s.reasons), style="bold red")
    return Text(", ".join(s.reasons) or "ok", style="green" if not s.reasons else "yellow")


def schedules_records(schedules: list[Schedule], every: list[Schedule]) -> Group:
    """One record per schedule for a narrow terminal: the id alone on its first line (whole, so
    it can be copied for `remove` and `ack`), then host, kind, user and verdict, when it runs,
    the command, and why it is stray."""
    out: list[Text] = []
    for s in schedules:
        spec = s.spec if s.kind != "loop" else f"pid {s.pid}" if s.pid else s.spec
        dim = "" if s.active else "dim"
        out.append(Text(shown(s.id), style=f"bold {dim}".strip(), no_wrap=True, overflow="fold"))
        head = Text("  ", style=dim)
        head.append(
            " · ".join(
                shown(x) for x in (s.host, s.kind + ("" if s.active else " (inactive)"), s.user)
            )
        )
        head.append(" · ")
        head.append_text(_flag(s))
        out.append(head)
        when = shown(spec) + (f" · next run {shown(s.next_run)}" if s.next_run else "")
        out.append(Text("  " + when, style=dim, overflow="fold"))
        out.append(Text("  " + shown(s.command), style=dim, overflow="fold"))
        if s.stray:
            out.append(
                Text(
                    "  why: " + shown(schedule_verdict.why(s, every)), style="red", overflow="fold"
                )
            )
        out.append(Text(""))
    return Group(*out[:-1])


def schedules_table(
    schedules: list[Schedule], fleet: list[Schedule] | None = None, width: int | None = None
) -> Table | Text | Group:
    """A rich table: one row per schedule, in the order given; a stray one says why in one line
    (`fleet`: every schedule of the fleet, for naming duplicates). Narrower than
    `RECORDS_BELOW` columns (`width`), one record per schedule instead."""
    if not schedules:
        return Text("no schedules or loops found")
    every = schedules if fleet is None else fleet
    if width is not None and width < RECORDS_BELOW:
        return schedules_records(schedules, every)
    # in a terminal the table takes its width, the free text sharing what the short columns
    # leave (spec 1 : command 3 : why 2); piped (a width no row reaches) each column its own
    t = Table(show_lines=False, header_style="bold", expand=width is not None and width < WHOLE)
    # an id is what `schedules remove` and `--ack` take: never folded or cut, so it can be copied
    # whole at any width (the long free-text columns fold instead)
    id_width = max(cell_len(shown(s.id)) for s in schedules)  # in terminal cells
    for col in ("host", "id", "kind", "user", "spec", "command", "next run", "stray", "why"):
        if col == "id":
            t.add_column(col, no_wrap=True, min_width=id_width)
        elif col in ("host", "kind", "user", "next run", "stray"):
            # short values: whole on one line; the free text (when, command, why) takes the
            # width that is left and folds in it, rather than nine equal columns
            t.add_column(col, no_wrap=True)
        else:
            t.add_column(col, overflow="fold", ratio={"spec": 1, "command": 3, "why": 2}[col])
    for s in schedules:
        spec = s.spec if s.kind != "loop" else f"pid {s.pid}" if s.pid else s.spec
        row_style = "" if s.active else "dim"
        flag = _flag(s)
        cells = [
            Text(shown(x))
            for x in (
                s.host,
                s.id,
                s.kind + ("" if s.active else " (inactive)"),
                s.user,
                spec,
                s.command,
                s.next_run or "",
            )
        ]
        t.add_row(
            *cells,
            flag,
            Text(shown(schedule_verdict.why(s, every)) if s.stray else ""),
            style=row_style,
        )
    return t
