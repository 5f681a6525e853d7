"""`fleetdeck launch HOST RUN.toml [--after RUN_PATH] [--resume] [--force] [--json]`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.console import Console
from rich.markup import escape

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.cli.args import add_hosts_option


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `launch` subcommand."""
    p = sub.add_parser(
        "launch",
        help="start training on a host (pre-flight checked, detached)",
        description="Check a run on HOST (base model, corpus, empty output, GPU "
        "memory, disk, no live run on its GPU), then start the trainer there "
        "detached, or queue it after RUN_PATH.",
    )
    p.add_argument("host", metavar="HOST")
    p.add_argument("run_toml", metavar="RUN.toml")
    p.add_argument(
        "--after",
        metavar="RUN_PATH",
        help="start only when this run (on HOST) finished with its adapter; cancel if it fails",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the failed or stopped run in RUN.toml's "
        "output folder from its newest checkpoint",
    )
    p.add_argument(
        "--force", action="store_true", help="start even if another run is live on the GPU"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    add_hosts_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Launch; 0 running or queued, 1 refused, cancelled or failed, 2 bad fleet file or RUN.toml."""
    # deferred: actions.launch (its helper modules and the run config, ~50 ms at every start of the CLI)
    from fleetdeck.backend.actions.launch.main import launch
    from fleetdeck.backend.actions.launch.values import run_values

    fleet = load_fleet(args.hosts)
    host = fleet.host(args.host)
    run_values(args.run_toml, host)  # a bad RUN.toml exits 2 before any host is asked

    async def go():
        # one connection: the poll that lists the host's live runs, then the launch itself
        async with Poller(fleet) as pool:
            (snap,) = (await pool.poll([host.name])).hosts
            # unreachable: launch asks again, and audits the failure with its reason
            return await launch(
                pool.link(host.name),
                args.run_toml,
                after=args.after,
                force=args.force,
                resume=args.resume,
                live=snap.runs if snap.reachable else None,
            )

    try:
        result = asyncio.run(go())
    except HostError as e:
        if args.json:
            print(
                json.dumps(
                    {
                        "host": host.name,
                        "run_path": None,
                        "state": "failed",
                        "pid": None,
                        "error": e.message,
                        "reason": e.code,
                        "preflight": [],
                    }
                )
            )
        print(f"fleetdeck: launch on {host.name} failed: {e.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        _show(result)
    if result.warning:
        print(f"fleetdeck: warning: {result.warning}", file=sys.stderr)
    if result.ok:
        return 0
    word = {"refused": "refused", "cancelled": "cancelled"}.get(result.state, "failed")
    print(f"fleetdeck: launch on {host.name} {word}: {result.error}", file=sys.stderr)
    return 1


def _show(result) -> None:
    out = Console()
    for c in result.preflight.checks:
        mark = "[green]ok[/]  " if c.ok else "[red]FAIL[/]"
        out.print(f"{mark} {c.name:<10} {escape(c.message)}", soft_wrap=True)
    if result.state == "running":
        word = (
            "resumed"
            if any(c.name == "resume" and c.ok for c in result.preflight.checks)
            else "started"
        )
        out.print(
            f"[bold]{word}[/] {escape(result.run_path)} on {result.host} (pid {result.pid}); "
            f"log: {escape(result.run_path)}/train.log",
            soft_wrap=True,
        )
    elif result.state == "finished":
        out.print(
            f"[bold]finished[/] {escape(result.run_path)} on {result.host} already", soft_wrap=True
        )
    elif result.state == "queued":
        out.print(
            f"[bold]queued[/] {escape(result.run_path)} on {result.host} after "
            f"{escape(result.after or '')} (waiter pid {result.waiter_pid})",
            soft_wrap=True,
        )
