"""`fleetdeck mcp`: a Model Context Protocol server on stdio, driven by the official SDK's own
stdio client as an agent would: its tools are listed, `fleet_status` answers what
`status --json` answers, `runs` is bounded with a count of what it left out, `run_log` is
escaped, and nothing it offers acts on a host."""

from __future__ import annotations

import json
import subprocess
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from support.cli import local_fleet
from support.probe import write_progress


def _json(result) -> dict:
    assert not result.is_error, result
    text = "".join(c.text for c in result.content if getattr(c, "text", None))
    return json.loads(text)


async def test_an_agent_sees_the_fleet_and_can_act_on_nothing(tmp_path):
    hosts = local_fleet(tmp_path)
    for n in ("run-3", "run-10", "run-\x1b[2J"):
        (tmp_path / "runs" / n).mkdir()
        write_progress(tmp_path / "runs" / n, range(1, 4))
    (tmp_path / "runs" / "run-3" / "train.log").write_bytes(b"step 1\n\x1b]52;c;SGk=\x07 boom\n")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "fleetdeck.cli.main", "--hosts", hosts, "mcp"]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"fleet_status", "runs", "run_log", "wait_for_run"} <= tools
        assert not {t for t in tools if any(w in t for w in ("purge", "stop", "launch", "remove"))}
        status = _json(await session.call_tool("fleet_status", {}))
        cli = subprocess.run(
            [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", hosts, "status", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        want = json.loads(cli.stdout)
        assert [h["name"] for h in status["hosts"]] == [h["name"] for h in want["hosts"]]
        assert status["fleet"] == want["fleet"] and status["hosts"][0]["reachable"] is True
        runs = _json(await session.call_tool("runs", {"limit": 2}))
        assert len(runs["runs"]) == 2 and runs["left_out"] == 1
        log = _json(await session.call_tool("run_log", {"host": "local", "run": "run-3"}))
        assert log["lines"][-1] == "\\x1b]52;c;SGk=\\x07 boom"
        missing = _json(await session.call_tool("run_log", {"host": "local", "run": "nope"}))
        assert missing["error"]["code"] == "no-run"
