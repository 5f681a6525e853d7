"""`fleetdeck mcp`'s plan tools, driven by the official SDK's stdio client against the loopback
sshd fleet: every tool the server lists is called with hostile arguments and nothing on the
host changes (files, the crontab, processes); a plan that passes records a proposal with the
client's name as its origin, which a person then confirms through the CLI's typed path, and a
proposal whose facts moved is refused, the agent reading why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import Implementation

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.proposals import ProposalStore

from support.purge import make_run

HOSTILE = "<script>$(touch {pwn})\x1b[2J\u009b"
AGENT = Implementation(name="test-agent", version="9.9")


def _server(hosts: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fleetdeck.cli.main", "--hosts", hosts, "mcp"],
        env=dict(os.environ),
    )


def _text(result) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if getattr(c, "text", None))


def _tree(*roots: Path) -> dict[str, tuple]:
    """Every file and folder under `roots`: its kind, size, mode and content's hash."""
    out: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            for name in dirs + files:
                p = Path(dirpath) / name
                st = p.lstat()
                data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
                out[str(p)] = (st.st_mode, st.st_size, hash(data))
    return out


def _crontab() -> str:
    out = subprocess.run(["crontab", "-l"], capture_output=True, text=True, timeout=30)
    return f"{out.returncode}\n{out.stdout}"


@pytest.fixture
def loop(tmp_path):
    """A shell loop in its own session (a schedule the probe lists), killed afterwards."""
    token = f"fdprop{os.getpid()}"
    p = subprocess.Popen(
        ["bash", "-c", f"while true; do sleep 1; done # {token}"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    yield p, token
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=30)


def _hostile_args(schema: dict, pwn: str, base: str) -> list[dict]:
    """Arguments for a tool from its input schema, each string, number and list at its worst."""
    strings = [
        HOSTILE.format(pwn=pwn),
        "/",
        base,
        f"-rf {base}",
        f"h1:{base}",
        "x" * 5000,
        f"{base}\n/etc",
        "../../../../etc/passwd",
        "/dev/stdin",
    ]
    props = schema.get("properties", {})
    out = []
    for i, s in enumerate(strings):
        args: dict = {}
        for name, spec in props.items():
            kind = spec.get("type") or next(
                (t.get("type") for t in spec.get("anyOf", []) if t.get("type") != "null"), "string"
            )
            if kind == "string":
                args[name] = "h1" if name in ("host",) and i % 2 else s
            elif kind == "array":
                args[name] = [s, "/", base]
            elif kind == "integer":
                args[name] = [-1, 0, 10**9][i % 3]
            elif kind == "number":
                args[name] = [-1.0, 1.0, 1e300][i % 3]
            elif kind == "boolean":
                args[name] = bool(i % 2)
        out.append(args)
    return out


async def test_every_tool_with_hostile_arguments_changes_nothing_on_the_host(
    sshd_fleet, tmp_path, loop
):
    runs = tmp_path / "runs"
    runs.mkdir()
    run = make_run(runs, "run-1")
    ck = run / "checkpoints" / "checkpoint-25"
    dst = tmp_path / "elsewhere"
    dst.mkdir()
    hosts = str(
        sshd_fleet.write_fleet(
            tmp_path / "hosts.toml",
            ["h1", "h2"],
            per_host={h: {"runs": [str(runs)]} for h in ("h1", "h2")},
        )
    )
    proc, token = loop
    pwn = str(tmp_path / "pwned")
    before = (_tree(runs, dst), _crontab())
    async with (
        stdio_client(_server(hosts)) as (read, write),
        ClientSession(read, write, client_info=AGENT) as session,
    ):
        await session.initialize()
        tools = (await session.list_tools()).tools
        called = set()
        for tool in tools:
            if tool.name == "wait_for_run":
                continue  # a run that is not there ends it at once, below, with a bound
            for args in _hostile_args(tool.input_schema, pwn, str(runs)):
                text = _text(await session.call_tool(tool.name, args))
                assert text.isascii() and "\x1b" not in text, tool.name
                json.loads(text)
                called.add(tool.name)
        _text(
            await session.call_tool("wait_for_run", {"host": "h1", "run": HOSTILE, "timeout_s": 1})
        )
        assert called | {"wait_for_run"} == {t.name for t in tools}

        # plans that pass record proposals, and still change nothing
        async def call(name: str, **kw) -> dict:
            return json.loads(_text(await session.call_tool(name, kw)))

        purge = await call("propose_purge", host="h1", paths=[str(ck)], reason="free the disk")
        assert purge["ok"] and purge["proposal"]["state"] == "pending", purge["refused"]
        assert purge["plan"]["witnesses"] == 2 and purge["plan"]["paths"][0]["path"] == str(ck)
        keep = await call(
            "propose_purge", host="h1", paths=[str(run)], keep_newest=1, reason="keep the last"
        )
        assert keep["ok"] and keep["plan"]["keep_newest"]["kept"], keep["refused"]
        mirror = await call(
            "propose_mirror",
            src=f"h1:{run / 'adapter'}",
            dst=f"h2:{dst / 'copy'}",
            reason="a second copy",
        )
        assert mirror["ok"] and mirror["plan"]["result"] == "would-copy", mirror
        listed = json.loads(_text(await session.call_tool("schedules", {"host": "h1"})))
        ours = [s for s in listed["schedules"] if token in s["command"] and s["kind"] == "loop"]
        assert ours, [s["command"] for s in listed["schedules"]]
        rm = await call(
            "propose_schedule_removal", host="h1", schedule_id=ours[0]["id"], reason="stray"
        )
        assert rm["ok"] and rm["proposal"]["kind"] == "remove-schedule", rm
        launch = await call(
            "propose_launch", host="h1", run_toml=str(tmp_path / "nope.toml"), reason="go"
        )
        assert launch["error"]["code"] == "bad-arguments" and not launch.get("proposal")
        for bad in ("../../etc/passwd", HOSTILE, "", "0" * 12):
            st = await call("proposal_status", proposal_id=bad)
            assert st["error"]["code"] in ("bad-id", "not-found")
        st = await call("proposal_status", proposal_id=purge["proposal"]["id"])
        assert st["state"] == "pending" and st["origin"]["client"] == "test-agent"
        assert st["origin"]["via"] == "mcp" and st["origin"]["client_version"] == "9.9"
    assert (_tree(runs, dst), _crontab()) == before
    assert proc.poll() is None, "the loop was stopped"
    assert not Path(pwn).exists()
    assert not [r for r in audit.read_audit() if r["action"] != "proposal"], "an action ran"
    kept = ProposalStore().load()
    assert {p.kind for p in kept} == {"purge", "mirror", "remove-schedule"}
    assert all(p.origin["client"] == "test-agent" and p.reason for p in kept)


async def test_the_agent_reads_a_refusal_when_facts_changed_and_a_done_when_confirmed(
    sshd_fleet, tmp_path
):
    runs = tmp_path / "runs"
    runs.mkdir()
    run = make_run(runs, "run-1")
    a, b = run / "checkpoints" / "checkpoint-25", run / "checkpoints" / "checkpoint-50"
    hosts = str(
        sshd_fleet.write_fleet(
            tmp_path / "hosts.toml", ["h1"], per_host={"h1": {"runs": [str(runs)]}}
        )
    )
    async with (
        stdio_client(_server(hosts)) as (read, write),
        ClientSession(read, write, client_info=AGENT) as session,
    ):
        await session.initialize()

        async def call(name: str, **kw) -> dict:
            return json.loads(_text(await session.call_tool(name, kw)))

        first = (await call("propose_purge", host="h1", paths=[str(a)], reason="old"))["proposal"]
        second = (await call("propose_purge", host="h1", paths=[str(b)], reason="older"))[
            "proposal"
        ]
        # a file under the second path grows between proposing and confirming
        with open(b / "optimizer.pt", "ab") as f:
            f.write(b"more")

        def confirm(pid: str, path: Path) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", hosts, "proposals"]
                + ["confirm", pid, f"--confirm={path}", "--json"],
                capture_output=True,
                text=True,
                timeout=180,
                stdin=subprocess.DEVNULL,
            )

        out = confirm(second["id"], b)
        assert out.returncode == 1 and b.is_dir(), out.stderr
        assert json.loads(out.stdout)["code"] == "facts-changed"
        st = await call("proposal_status", proposal_id=second["id"])
        assert st["state"] == "refused" and st["outcome"]["code"] == "facts-changed"
        assert "path's identity, size or verdict" in st["outcome"]["message"]

        out = confirm(first["id"], a)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["deleted"] is True and not a.exists()
        st = await call("proposal_status", proposal_id=first["id"])
        assert st["state"] == "done" and st["outcome"]["exit"] == 0
    recs = [r for r in audit.read_audit() if r.get("proposal") == first["id"]]
    assert [r["result"] for r in recs] == ["proposed", "confirmed", "done"]
    assert {r["origin"]["client"] for r in recs} == {"test-agent"}
    assert [r["result"] for r in audit.read_audit() if r["action"] == "purge"] == [
        "started",
        "done",
    ]
