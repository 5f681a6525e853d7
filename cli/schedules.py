"""`fleetdeck schedules`: list every schedule and loop, acknowledge known ones, remove one."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.schedules import (
    DEFAULT_GRACE,
    check_removal,
    describe_removal,
    remove_schedule,
)
from fleetdeck.backend.fleet import acks, schedule_verdict
from fleetdeck.backend.fleet.config import Fleet, load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import FleetSnapshot, Schedule, schedule_json, unreachable_json
from fleetdeck.backend.fleet.poller import poll_fleet
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option, seconds_type
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


# -- polling ------------------------------------------------------------------------------
def poll(fleet: Fleet, names: list[str] | None) -> FleetSnapshot:
    """One fresh poll of these hosts (all when None); stray and reasons already decided."""
    return asyncio.run(poll_fleet(fleet, hosts=names))


def _names(fleet: Fleet, wanted: list[str] | None) -> list[str] | None:
    if not wanted:
        return None
    for n in wanted:
        fleet.host(n)  # ConfigError (exit 2) for a host the fleet file does not name
    return list(dict.fromkeys(wanted))


def sentence(msg: str | None) -> str:
    """A reason sentence as it may be printed. The backend builds them with every untrusted
    part already escaped by `shown`, so a printable one is printed as it is (escaping it again
    would double its backslashes); anything else is escaped whole."""
    if msg is None:
        return ""
    return msg if msg.isprintable() else shown(msg)


def _unreachable(snap: FleetSnapshot) -> list[tuple[str, str, str | None]]:
    return [
        (h.name, h.error or "unknown error", h.error_code) for h in snap.hosts if not h.reachable
    ]


# -- schedules ------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    """Print the schedules table (or JSON), what needs action first; exit 1 if a requested host
    could not be asked. The whole fleet is polled whatever `--host` says, so that the verdict
    (a duplicate on another host) is the same however the listing is narrowed."""
    fleet = load_fleet(args.hosts)
    wanted = _names(fleet, args.host_filter)
    snap = poll(fleet, None)
    shown_hosts = set(wanted) if wanted else {h.name for h in snap.hosts}
    every = list(snap.schedules)
    rows = schedule_verdict.stray_first(
        s
        for s in every
        if s.host in shown_hosts
        and (s.stray or not args.stray_only)
        and matches(
            args.filter,
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
    down = [d for d in _unreachable(snap) if d[0] in shown_hosts]
    if args.json:
        print(
            json.dumps(
                {
                    "schedules": [
                        dict(schedule_json(s), why=schedule_verdict.why(s, every)) for s in rows
                    ],
                    "unreachable": [unreachable_json(*d) for d in down],
                }
            )
        )
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


def _ack_refused(ids: list[str], code: str, msg: str, **extra: Any) -> int:
    audit.audit(
        "schedule-ack",
        None,
        "refused",
        ids=[shown(i) for i in ids],
        reason_code=code,
        message=msg,
        **extra,
    )
    print(f"fleetdeck: {msg}", file=sys.stderr)
    return 1


def cmd_ack(args: argparse.Namespace) -> int:
    """Acknowledge ids seen in a fresh poll, on the host listing each (or, with --all-hosts, on
    every host); refuse (exit 1, nothing stored) if any id is unknown or, on several hosts,
    ambiguous."""
    if args.ack_all or not args.ids:
        return _ack_all(args)
    fleet = load_fleet(args.hosts)
    wanted = _names(fleet, args.host_filter)
    snap = poll(fleet, None)
    ids = list(dict.fromkeys(args.ids))
    where: dict[str, list[str]] = {}
    for s in snap.schedules:
        if s.id in ids and (not wanted or s.host in wanted) and s.host not in where.get(s.id, []):
            where.setdefault(s.id, []).append(s.host)
    unknown = [i for i in ids if i not in where]
    if unknown:
        down = _unreachable(snap)
        on = f" on {', '.join(wanted)}" if wanted else ""
        why = f" (unreachable: {', '.join(d[0] for d in down)})" if down else ""
        return _ack_refused(
            ids,
            "not-found",
            f"no schedule with id {', '.join(shown(i) for i in unknown)}{on} "
            f"in a fresh listing{why}; nothing was acknowledged",
            unknown=[shown(i) for i in unknown],
        )
    if not args.all_hosts and not wanted:
        many = {i: hs for i, hs in where.items() if len(hs) > 1}
        if many:
            i, hs = next(iter(many.items()))
            return _ack_refused(
                ids,
                "ambiguous",
                f"{shown(i)} is listed on {', '.join(hs)}: name the host with "
                "--host NAME, or cover every host with --all-hosts; nothing was acknowledged",
            )
    if args.all_hosts:
        acks.acknowledge(everywhere=ids)
    else:
        acks.acknowledge(on_host=[(h, i) for i in ids for h in where[i]])
    acked_on = sorted({h for i in ids for h in where[i]})
    audit.audit(
        "schedule-ack",
        "*" if args.all_hosts else ", ".join(acked_on),
        "done",
        ids=ids,
        all_hosts=bool(args.all_hosts),
        hosts={i: where[i] for i in ids},
    )
    scope = (
        "on every host"
        if args.all_hosts
        else "on " + ", ".join(sorted({h for i in ids for h in where[i]}))
    )
    Console().print(
        Text(f"acknowledged {len(ids)} schedule(s) {scope}: {', '.join(shown(i) for i in ids)}")
    )
    return 0


def _ack_all(args: argparse.Namespace) -> int:
    """`ack --host H --all`: acknowledge, on each named host, every schedule a fresh poll lists
    there as unacknowledged (exit 1 when a named host cannot be asked; nothing is stored then)."""
    if not args.ack_all or args.ids or not args.host_filter or args.all_hosts:
        print(
            "fleetdeck: schedules ack: give ids, or --host NAME --all (without ids) to acknowledge every "
            "unacknowledged schedule of that host",
            file=sys.stderr,
        )
        return 2
    fleet = load_fleet(args.hosts)
    wanted = _names(fleet, args.host_filter) or []
    snap = poll(fleet, None)
    down = [d for d in _unreachable(snap) if d[0] in wanted]
    if down:
        return _ack_refused(
            [],
            "host-unreachable",
            f"{down[0][0]} is unreachable ({sentence(down[0][1])}); nothing was acknowledged",
            hosts=wanted,
        )
    pairs = sorted(
        {
            (s.host, s.id)
            for s in snap.schedules
            if s.host in wanted and "unacknowledged" in s.reasons
        }
    )
    if pairs:
        acks.acknowledge(on_host=pairs)
    audit.audit(
        "schedule-ack",
        ", ".join(wanted),
        "done",
        ids=[i for _, i in pairs],
        all=True,
        hosts={h: [i for hh, i in pairs if hh == h] for h in wanted},
    )
    for h in wanted:
        n = sum(1 for hh, _ in pairs if hh == h)
        Console().print(
            Text(
                f"{h}: acknowledged {n} schedule{'' if n == 1 else 's'}"
                if n
                else f"{h}: no unacknowledged schedule to acknowledge"
            )
        )
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Remove one schedule after the id was typed back; exit 0 only when done and verified."""
    fleet = load_fleet(args.hosts)
    host_cfg = fleet.host(args.target_host)
    sid = args.schedule_id
    snap = poll(fleet, [host_cfg.name])
    hs = snap.hosts[0] if snap.hosts else None
    if hs is None or not hs.reachable:
        err = hs.error if hs else "no answer"
        audit.audit(
            "schedule-remove",
            host_cfg.name,
            "refused",
            schedule={"id": sid},
            confirmation=args.confirm,
            reason_code="host-unreachable",
            message=err,
        )
        return _fail(
            args,
            {
                "host": host_cfg.name,
                "id": sid,
                "removed": False,
                "result": "refused",
                "reason_code": "host-unreachable",
                "message": f"{host_cfg.name} is unreachable: {err}",
            },
        )
    sched = next((s for s in hs.schedules if s.id == sid), None)
    if sched is None:
        msg = f"no schedule with id {shown(sid)} on {host_cfg.name} in a fresh listing; nothing was changed"
        audit.audit(
            "schedule-remove",
            host_cfg.name,
            "refused",
            schedule={"id": sid},
            confirmation=args.confirm,
            reason_code="not-found",
            message=msg,
        )
        return _fail(
            args,
            {
                "host": host_cfg.name,
                "id": sid,
                "removed": False,
                "result": "refused",
                "reason_code": "not-found",
                "message": msg,
            },
        )
    confirmation = args.confirm
    if confirmation is None and sys.stdin.isatty():
        confirmation = _prompt(host_cfg, sched, args.grace)
    rep = asyncio.run(_remove(host_cfg, sched, confirmation, args.grace))
    if args.json:
        print(json.dumps(rep.to_json()))
    if not rep.ok:
        verb = "refused to remove" if rep.result == "refused" else "failed to remove"
        print(
            f"fleetdeck: {verb} {shown(sid)} on {host_cfg.name} ({rep.reason_code}): {sentence(rep.message)}",
            file=sys.stderr,
        )
        return 1
    if not args.json:
        out = Console()
        out.print(Text(f"{host_cfg.name}: {sentence(rep.message)}", style="green"))
        if rep.backup:
            out.print(Text(f"backup on this machine: {rep.backup}"))
        if rep.host_backup:
            out.print(Text(f"backup on {host_cfg.name}: {shown(rep.host_backup)}"))
    return 0


def _fail(args: argparse.Namespace, doc: dict[str, Any]) -> int:
    if args.json:
        print(json.dumps(doc))
    print(
        f"fleetdeck: refused to remove {shown(doc['id'])} on {doc['host']} ({doc['reason_code']}): "
        f"{sentence(doc['message'])}",
        file=sys.stderr,
    )
    return 1


async def _remove(host_cfg, sched: Schedule, confirmation: str | None, grace: float):
    link = HostLink(host_cfg)
    try:
        return await remove_schedule(link, sched, confirmation, grace=grace)
    finally:
        await link.close()


async def _check(host_cfg, sched: Schedule):
    link = HostLink(host_cfg)
    try:
        return await check_removal(link, sched)
    finally:
        await link.close()


def _prompt(host_cfg, sched: Schedule, grace: float) -> str | None:
    """Show what will be removed (and what the host says about it now); read the id typed back."""
    err = Console(stderr=True)
    err.print(Text(f"Remove from {host_cfg.name}: {sched.kind} {shown(sched.id)}", style="bold"))
    for label, value in (
        ("user", sched.user),
        ("spec", sched.spec),
        ("command", sched.command),
        ("source", sched.source),
        ("line", sched.raw),
        ("pid", sched.pid and str(sched.pid)),
    ):
        if value:
            err.print(Text(f"  {label}: {shown(str(value))}"))
    # the sentence names the entry's user, file, unit or job as the host gave them
    err.print(Text(f"  it will: {shown(describe_removal(sched, grace))}"))
    check = asyncio.run(_check(host_cfg, sched))
    if not check.ok:
        err.print(Text(f"  the host says: {sentence(check.message)}", style="yellow"))
    for c in check.children:
        err.print(Text(f"  also stops: pid {c.get('pid')} {shown(str(c.get('command') or ''))}"))
    if check.warning:
        err.print(Text(f"  WARNING: {sentence(check.warning)}", style="bold red"))
    try:
        return input("Type the id to confirm: ")
    except EOFError:
        return None
