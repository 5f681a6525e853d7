"""`fleetdeck mcp`: the fleet for agents, over the Model Context Protocol (stdio, the official
`mcp` SDK's `MCPServer`).

Read-only tools, each answering the same JSON as the CLI's `--json` for the same question (one
source: the same functions build both), every string from a host escaped where the CLI escapes
it, every list bounded with a count of what was left out:

- `fleet_status`: `fleetdeck status --json`;
- `runs`: `fleetdeck runs --json`, at most `limit` runs (`left_out` counts the rest);
- `run_log`: the last `lines` (at most 200) lines of a run's log, escaped;
- `wait_for_run`: `fleetdeck wait --json`, its timeout bounded to an hour.

Nothing here deletes, stops or launches: those stay with a person who types the path back.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.logs import log_lines
from fleetdeck.backend.fleet.models import run_json, unreachable_json
from fleetdeck.backend.fleet.poller import poll_fleet
from fleetdeck.backend.fleet.run_order import ordered_runs
from fleetdeck.backend.fleet.run_wait import RunNotFound
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option

#: the most a list in an answer holds, and the longest a wait may be asked for
RUNS_MAX = 500
LINES_MAX = 200
WAIT_MAX_S = 3600.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="the fleet for agents: a read-only Model Context Protocol server on stdio",
        description="Serve the fleet's status, runs, a run's log and `wait` to an agent over the "
        "Model Context Protocol on stdin/stdout (the official mcp SDK). Read-only: nothing it "
        "offers deletes, stops or launches.",
    )
    add_hosts_option(p)
    p.set_defaults(func=cmd_mcp)


def build(hosts: str | None) -> Any:
    """The server, its tools registered (the `mcp` package imported here: an optional extra).
    ImportError when it is not installed."""
    try:
        # deferred: mcp.server.mcpserver (the optional `mcp` extra; only this command needs it)
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise

    fleet = load_fleet(hosts)
    server = MCPServer(
        "fleetdeck",
        instructions="Read-only view of a GPU training fleet: status, runs, logs, wait.",
    )

    @server.tool(
        description="Every host's GPUs, memory, disks, runs and schedules: `status --json`."
    )
    async def fleet_status() -> dict[str, Any]:
        snap = await poll_fleet(fleet, None)
        return {**snap.to_json(), "fleet": fleet.source}

    @server.tool(description="Training runs, live first: `runs --json`, at most `limit` of them.")
    async def runs(limit: int = 100) -> dict[str, Any]:
        limit = max(1, min(int(limit), RUNS_MAX))
        snap = await poll_fleet(fleet, None)
        listed = ordered_runs(snap.runs, [h.name for h in snap.hosts])
        return {
            "runs": [run_json(r) for r in listed[:limit]],
            "left_out": max(0, len(listed) - limit),
            "unreachable": [
                unreachable_json(h.name, h.error, h.error_code)
                for h in snap.hosts
                if not h.reachable
            ],
        }

    @server.tool(description="The last lines of a run's log (escaped), at most 200.")
    async def run_log(host: str, run: str, lines: int = 40) -> dict[str, Any]:
        n = max(1, min(int(lines), LINES_MAX))
        out: list[str] = []
        try:
            async with HostLink(fleet.host(host)) as link:
                async for line in log_lines(link, run, n, False):
                    out.append(shown(line))
        except HostError as e:
            return {"host": host, "run": run, "error": {"code": e.code, "message": e.message}}
        return {"host": host, "run": run, "lines": out[-n:]}

    @server.tool(
        description="Block until a run finished with a whole final adapter, failed, or the timeout "
        "(at most 3600 s) passed: `wait --json`."
    )
    async def wait_for_run(host: str, run: str, timeout_s: float = 600.0) -> dict[str, Any]:
        try:
            res = await wait_for_run(
                fleet, host, run, max(1.0, min(float(timeout_s), WAIT_MAX_S)), 5.0
            )
        except RunNotFound as e:
            return {"host": host, "run": run, "error": {"code": e.code, "message": e.message}}
        return res.to_json()

    return server


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        server = build(args.hosts)
    except ImportError:
        print(
            "fleetdeck: `fleetdeck mcp` needs the mcp package: pip install 'fleetdeck[mcp]'",
            file=sys.stderr,
        )
        return 2
    server.run("stdio")
    return 0
