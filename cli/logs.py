"""`fleetdeck logs HOST RUN [-f] [-n N] [--grep PATTERN]`: a run's train.log, and with -f what is appended to it."""

from __future__ import annotations

import argparse
import asyncio
import sys

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.logs import grep_pattern, log_lines
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option, at_least_one


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "logs",
        help="a run's train.log (-f: follow it, as tail -f)",
        description="Print the last lines of a run's train.log on HOST; with -f keep printing "
        "what is appended until interrupted. RUN is a run folder's name under one of the host's "
        "runs roots, or its path. Each line is escaped for the terminal. --grep PATTERN keeps only "
        "the lines that match a regular expression (the last N matches, searched on the host "
        "in the last 64 MiB of the log; with -f, each appended line that matches).",
    )
    add_hosts_option(p)
    p.add_argument("host", metavar="HOST")
    p.add_argument("run", metavar="RUN")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing appended lines")
    p.add_argument(
        "-n",
        "--lines",
        type=at_least_one,
        default=40,
        metavar="N",
        help="how many of the last lines to print first (default 40)",
    )
    p.add_argument(
        "--grep",
        metavar="PATTERN",
        default=None,
        help="only the lines matching this regular expression (Python syntax, case sensitive; "
        "(?i) for any case)",
    )
    p.set_defaults(func=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    if args.grep is not None:
        try:
            grep_pattern(args.grep)
        except ValueError as e:
            print(f"fleetdeck: {shown(str(e))}", file=sys.stderr)
            return 2
    fleet = load_fleet(args.hosts)
    cfg = fleet.host(args.host)

    async def go() -> None:
        async with HostLink(cfg) as link:
            async for line in log_lines(link, args.run, args.lines, args.follow, grep=args.grep):
                sys.stdout.write(shown(line.expandtabs()) + "\n")
                sys.stdout.flush()

    try:
        asyncio.run(go())
    except HostError as e:
        print(f"fleetdeck: {args.host}: {shown(e.message)} ({e.code})", file=sys.stderr)
        usage = ("no-run", "ambiguous-run", "no-log", "not-a-file", "symlink", "bad-pattern")
        return 2 if e.code in usage else 1
    return 0
