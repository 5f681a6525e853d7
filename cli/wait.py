"""`fleetdeck wait HOST RUN [--timeout 6h] [--json]`: block until a run ends.

Exit 0: finished with a whole final adapter. 1: failed (the reason on stderr): its trainer ended
without a final adapter, run.json says failed or cancelled, or it is not running at all. 3: the
timeout passed. 2: usage, or no such run (or a name that matches two). A host that stops
answering is waited through, never read as a failed run. It is what a script or an agent puts
where an hourly ":37 check on the run, inform when ready" cron line used to be.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.run_wait import RunNotFound, split_target, wait_for_run
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option, seconds_type
from fleetdeck.cli.history import duration
from fleetdeck.show.fmt import said


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "wait",
        help="block until a run finishes with its adapter (0), fails (1) or the time is up (3)",
        description="Wait for a run on HOST, whoever started it: exit 0 once it finished with a "
        "whole final adapter, 1 once it failed (the reason on stderr), 3 when --timeout passed, "
        "2 when no run (or more than one) answers to RUN. RUN is a run folder's name under one "
        "of the host's runs roots, a path under one, or its absolute path; HOST:PATH works too. "
        "A host that stops answering is waited through (said on stderr when it is a terminal).",
    )
    add_hosts_option(p)
    p.add_argument("host", metavar="HOST", help="the host, or HOST:PATH")
    p.add_argument("run", metavar="RUN", nargs="?", default=None)
    p.add_argument(
        "--timeout",
        type=duration,
        default=None,
        metavar="DURATION",
        help="give up after this long: 90s, 30m, 6h, 2d (default: wait as long as it takes)",
    )
    p.add_argument(
        "--interval",
        type=seconds_type("from 0.5 to 600 seconds", lambda v: 0.5 <= v <= 600),
        default=5.0,
        metavar="SECONDS",
        help="how often the host is asked (default 5)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    p.set_defaults(func=cmd_wait)


def cmd_wait(args: argparse.Namespace) -> int:
    try:
        host, run = split_target(args.host, args.run)
    except RunNotFound as e:
        print(f"fleetdeck: {e.message}", file=sys.stderr)
        return 2
    fleet = load_fleet(args.hosts)
    fleet.host(host)  # a ConfigError naming the known hosts, before anything is asked
    tty = sys.stderr.isatty()

    def note(text: str) -> None:
        if tty:
            print(f"fleetdeck: {text}", file=sys.stderr, flush=True)

    try:
        res = asyncio.run(wait_for_run(fleet, host, run, args.timeout, args.interval, note))
    except RunNotFound as e:
        print(f"fleetdeck: {e.message} ({e.code})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    name = shown(res.path or run)
    if args.json:
        print(json.dumps(res.to_json(), indent=1))
    elif res.result == "finished":
        print(f"run {name} on {host} finished: its final adapter is {shown(res.adapter)}")
    if res.result == "failed":
        print(f"fleetdeck: run {name} on {host} failed: {said(res.reason)}", file=sys.stderr)
    elif res.result == "timeout":
        print(
            f"fleetdeck: run {name} on {host} is still {res.state or 'not seen'} after "
            f"{res.waited_s:.0f}s (--timeout)",
            file=sys.stderr,
        )
    return res.exit_code
