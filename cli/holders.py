"""`fleetdeck holders HOST PATH [--json]`: the processes holding a file under PATH on HOST."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions.holders import find_holders
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.cli.tables import listing_console

#: refusals about the PATH as given: a usage error (exit 2), not a host's failure
USAGE_CODES = ("not-absolute", "not-normalized", "bad-request")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "holders",
        help="processes holding a file under a path (open, mapped or cwd)",
        description="List the processes on HOST that hold a file under PATH open, mapped, "
        "or as their working or root folder, as purge's in-use check reads them (every "
        "process's /proc fds, maps, cwd and root). PATH is absolute or starts with ~ "
        "(expanded on HOST); links in it are followed. Exit 0 when the host answered "
        "(whether or not anything holds it), 1 when it could not be asked or refused "
        "(PATH not found), 2 for a bad PATH or an unknown host.",
    )
    add_hosts_option(p)
    p.add_argument("host", metavar="HOST")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON document")
    p.set_defaults(func=cmd_holders)


def cmd_holders(args: argparse.Namespace) -> int:
    fleet = load_fleet(args.hosts)
    cfg = fleet.host(args.host)

    async def go():
        async with HostLink(cfg) as link:
            return await find_holders(link, args.path)

    try:
        rep = asyncio.run(go())
    except HelperError as e:
        print(f"fleetdeck: {args.host}: {shown(e.message)} ({e.code})", file=sys.stderr)
        return 2 if e.code in USAGE_CODES else 1
    except HostError as e:
        print(f"fleetdeck: {args.host}: {shown(e.message)} ({e.code})", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rep.to_json(), indent=1))
    else:
        print_report(rep)
    for pid, comm, error in rep.unreadable:
        print(
            f"fleetdeck: {rep.host}: process {pid} ({shown(comm)}) could not be read: {shown(error)}",
            file=sys.stderr,
        )
    if not rep.complete:
        print(
            f"fleetdeck: {rep.host}: {shown(rep.resolved)} was not indexed whole ({rep.entries:,} entries: "
            "too many to walk, or a folder deeper than the walk goes, unreadable or gone while walked): "
            "files not indexed are matched by name only (a cwd among them is not seen)",
            file=sys.stderr,
        )
    return 0


def print_report(rep) -> None:
    """The holders as a table (every host value escaped), or one line saying none."""
    where = f"{rep.host}:{shown(rep.resolved)}"
    if not rep.holders:
        print(f"no process holds a file under {where} ({rep.processes:,} processes read)")
        return
    console = listing_console(soft_wrap=False)
    t = Table(title=f"holders of {where} ({len(rep.holders)} of {rep.processes:,} processes read)")
    for col in ("pid", "user", "how", "file", "command"):
        t.add_column(col, overflow="fold")
    for h in rep.holders:
        hows = ", ".join(dict.fromkeys(u.how for u in h.uses))
        more = len(h.uses) - 1 + h.more_uses
        file = shown(h.uses[0].file) if h.uses else "-"
        if more:
            file += f" (+{more} more)"
        t.add_row(
            str(h.pid),
            Text(shown(h.user)),
            hows,
            Text(file),
            Text(shown(h.command or f"[{h.comm}]")),
        )
    console.print(t)
