"""`fleetdeck mcp`: the fleet for agents, over the Model Context Protocol (stdio, the official
`mcp` SDK's `MCPServer`).

Read-only tools (`mcp_tools`), each answering the same JSON as the CLI's `--json` for the same
question (one source: the same functions build both), every string from a host escaped as the
CLI's JSON escapes it, every list bounded with a count of what was left out:

- `fleet_status`: `fleetdeck status --json`;
- `runs`: `fleetdeck runs --json`, at most `limit` runs;
- `run_log`: the last `lines` (at most 200) lines of a run's log, escaped;
- `run_log_grep`: the last matching lines, for a literal string or a bounded regex;
- `schedules`: `fleetdeck schedules --json`, with why each stray one is stray;
- `alerts` and `silences`: `fleetdeck alerts --json` and `fleetdeck silence list --json`;
- `history`: `fleetdeck history HOST --json` over a bounded window, a bounded number of rows;
- `holders`: `fleetdeck holders HOST PATH --json`; `gpu_holders`: who holds a GPU's memory;
- `wait_for_run`: `fleetdeck wait --json`, its timeout bounded to an hour.

Plan tools (`mcp_propose`): `propose_purge`, `propose_mirror`, `propose_launch` and
`propose_schedule_removal` run the action's full pre-flight and record a proposal that a person
carries out (`fleetdeck proposals confirm ID`, or the dashboard's Proposals view) by the
action's own typed confirmation; `proposal_status` and `proposals` read what became of them.

Nothing here deletes, copies, starts or stops anything: those stay with a person who types the
path back.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.cli.mcp_propose import register_proposal_tools
from fleetdeck.cli.mcp_tools import register_tools


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="the fleet for agents: a Model Context Protocol server on stdio (read and propose)",
        description="Serve the fleet's status, runs, run logs (tail and grep), schedules, "
        "alerts, silences, a host's history, holders and `wait` to an agent over the Model "
        "Context Protocol on stdin/stdout (the official mcp SDK), and plan tools that record "
        "proposals a person confirms with `fleetdeck proposals`. Nothing it offers deletes, "
        "copies, starts or stops anything.",
    )
    add_hosts_option(p)
    p.set_defaults(func=cmd_mcp)


def build(hosts: str | None) -> Any:
    """The server, its tools registered (the `mcp` package imported here: an optional extra).
    ImportError when it is not installed."""
    # deferred: mcp.server.mcpserver (the optional `mcp` extra; only this command needs it)
    from mcp.server.mcpserver import MCPServer

    # deferred: mcp.server.mcpserver.context (the optional `mcp` extra, as above)
    from mcp.server.mcpserver.context import Context

    # deferred: mcp.types (the optional `mcp` extra, as above)
    from mcp.types import ToolAnnotations

    fleet = load_fleet(hosts)
    server = MCPServer(
        "fleetdeck",
        instructions="Read-only view of a GPU training fleet: status, runs, logs, schedules, "
        "alerts, silences, history, holders, wait. The propose_* tools plan an action and "
        "record a proposal for a person to confirm; no tool changes anything on a host.",
    )
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    register_tools(server, fleet, read_only)
    # a proposal is written in this machine's state folder: not read-only, never destructive
    proposing = ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
    register_proposal_tools(server, fleet, Context, proposing, read_only)
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
