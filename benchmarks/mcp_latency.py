"""One MCP call against the same CLI command: `fleet_status` through a long-lived `fleetdeck mcp`
stdio session (the official SDK's client, as an agent holds it), against `fleetdeck status --json`
as a new process each time (what an agent that shells out pays).

The two arms take turns round after round (the order swapped each round, so neither always runs
on a cache the other warmed); each figure is the median of `--runs` rounds, and the ratio is the
CLI's median over the MCP call's. The session's own start (spawn and `initialize`) is timed once
and printed apart. Without `--hosts` it watches this machine: both arms run in an empty folder
with empty XDG config and state folders, so no fleet file is found (`docs/fleet-file.md`).

    python benchmarks/mcp_latency.py --runs 15
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Latency of one `fleet_status` MCP call through a long-lived stdio session "
        "against `fleetdeck status --json` as a process, median of N rounds each, and their ratio."
    )
    p.add_argument("--runs", type=int, default=15, help="rounds (default 15)")
    p.add_argument(
        "--hosts", metavar="FILE", help="a fleet file (default: none, this machine alone)"
    )
    return p.parse_args()


def cli_argv(hosts: str | None, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fleetdeck.cli.main",
        *(["--hosts", hosts] if hosts else []),
        *args,
    ]


async def bench(args: argparse.Namespace, env: dict[str, str], cwd: str) -> dict[str, object]:
    # deferred: mcp (the optional `mcp` extra; --help works without it)
    from mcp import ClientSession

    # deferred: mcp.client.stdio (as above)
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=cli_argv(args.hosts, "mcp")[1:], env=env, cwd=cwd
    )
    mcp_s: list[float] = []
    cli_s: list[float] = []
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        start_s = time.perf_counter() - t0

        async def one_call() -> None:
            t = time.perf_counter()
            res = await session.call_tool("fleet_status", {})
            mcp_s.append(time.perf_counter() - t)
            text = "".join(getattr(c, "text", "") for c in res.content)
            assert not res.is_error and json.loads(text)["hosts"], text[:200]

        def one_cli() -> None:
            t = time.perf_counter()
            out = subprocess.run(
                cli_argv(args.hosts, "status", "--json"),
                capture_output=True,
                text=True,
                env=env,
                cwd=cwd,
                timeout=300,
            )
            cli_s.append(time.perf_counter() - t)
            assert json.loads(out.stdout)["hosts"], out.stderr

        for i in range(args.runs):
            if i % 2:
                one_cli()
                await one_call()
            else:
                await one_call()
                one_cli()
    return {"start_s": start_s, "mcp_s": mcp_s, "cli_s": cli_s}


def main() -> int:
    args = parse()
    try:
        # deferred: mcp (the optional `mcp` extra; checked after --help)
        import mcp  # noqa: F401
    except ImportError:
        print("mcp_latency: needs the mcp package: pip install 'fleetdeck[mcp]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fleetdeck-mcp-bench-") as tmp:
        env = dict(os.environ, XDG_CONFIG_HOME=f"{tmp}/config", XDG_STATE_HOME=f"{tmp}/state")
        env.pop("FLEETDECK_HOSTS", None)
        if args.hosts:
            args.hosts = str(Path(args.hosts).resolve())
        figs = asyncio.run(bench(args, env, tmp))
    mcp_med = statistics.median(figs["mcp_s"])  # type: ignore[arg-type]
    cli_med = statistics.median(figs["cli_s"])  # type: ignore[arg-type]
    print(f"fleet: {args.hosts or 'this machine (no fleet file)'}; {args.runs} rounds")
    print(f"mcp session start (spawn + initialize): {figs['start_s'] * 1000:.0f} ms")
    print(f"fleet_status over MCP, median: {mcp_med * 1000:.0f} ms")
    print(f"status --json as a process, median: {cli_med * 1000:.0f} ms")
    print(f"ratio (CLI / MCP): {cli_med / mcp_med:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
