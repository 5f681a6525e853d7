"""`fleetdeck mcp`: a Model Context Protocol server on stdio, driven by the official SDK's own
stdio client as an agent would, against the loopback sshd fleet: every tool is listed and
called, each answers what its CLI command's `--json` answers, every list is bounded with a
count of what it left out, a hostile string from a host comes back escaped, and nothing it
offers acts on a host."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from fleetdeck.backend.fleet.logs import bounded_pattern

from support.cli import local_fleet
from support.history import _night
from support.probe import write_progress

#: a run folder's name and a loop's text as hostile as a host may send them
HOSTILE = "<script>$(id)\x1b[2J\u009b"
#: every tool the server offers: a new one is added here once it is held to the tests below
TOOLS = {
    "fleet_status",
    "runs",
    "run_log",
    "run_log_grep",
    "schedules",
    "alerts",
    "silences",
    "history",
    "holders",
    "gpu_holders",
    "wait_for_run",
}
#: the tools that plan an action and record a proposal, and those that read proposals back
#: (tests/fleet/test_mcp_proposals.py holds them to acting on nothing)
PLAN_TOOLS = {
    "propose_purge",
    "propose_mirror",
    "propose_launch",
    "propose_schedule_removal",
    "proposal_status",
    "proposals",
}
#: words that would offer an action: none may name or describe a tool
ACTIONS = re.compile(
    r"\b(delet|remov|purg|stop|kill|launch|start|copy|copie|mirror|ack|acknowledg|expir|"
    r"creat|writ|execut|restart|cancel|confirm|propos)\w*",
    re.IGNORECASE,
)


def _text(result) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if getattr(c, "text", None))


def _json(result) -> dict:
    return json.loads(_text(result))


def _cli(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )
    return json.loads(out.stdout)


def _server(hosts: str) -> StdioServerParameters:
    # the whole environment: the state folder (history, silences) is the test's own
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fleetdeck.cli.main", "--hosts", hosts, "mcp"],
        env=dict(os.environ),
    )


def _group(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


@pytest.fixture
def procs():
    """Processes started in their own session, each whole group killed afterwards."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)


async def test_no_tool_offers_an_action(tmp_path):
    async with (
        stdio_client(_server(local_fleet(tmp_path))) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = (await session.list_tools()).tools
    assert {t.name for t in tools} == TOOLS | PLAN_TOOLS
    for t in tools:
        if t.name in PLAN_TOOLS:
            assert t.annotations is not None and t.annotations.destructive_hint is False
            continue
        said = f"{t.name} {t.title or ''} {t.description or ''}"
        assert not ACTIONS.search(said.replace("_", " ")), (t.name, ACTIONS.search(said))
        assert t.annotations is not None and t.annotations.read_only_hint is True
        assert t.annotations.destructive_hint is False


async def test_every_tool_answers_its_cli_json_bounded_and_escaped(sshd_fleet, tmp_path, procs):
    runs = tmp_path / "runs"
    runs.mkdir()
    hosts = str(
        sshd_fleet.write_fleet(
            tmp_path / "hosts.toml", ["h1", "h2"], per_host={"h1": {"runs": [str(runs)]}}
        )
    )
    for n in ("run-3", "run-10", HOSTILE):
        (runs / n).mkdir()
        write_progress(runs / n, range(1, 4))
    os.mkdir(os.fsencode(runs) + b"/run-\xff")  # a name that is not UTF-8
    write_progress(runs / os.fsdecode(b"run-\xff"), range(1, 4))
    (runs / "run-10" / "run.json").write_text(json.dumps({"state": "failed"}))
    log = runs / "run-3" / "train.log"
    log.write_bytes(
        b"".join(b"step %d loss=%0.3f\n" % (i, 3 - i / 100) for i in range(300))
        + b"\x1b]52;c;SGk=\x07 boom $(id)\n"
    )
    # loops whose text is hostile (each host of the loopback fleet is this machine: both list
    # them), and three processes holding the log open
    token = f"fdmcp{os.getpid()}"
    for _ in range(2):
        procs.append(_group(["bash", "-c", f"while true; do sleep 1; done # {token} {HOSTILE}"]))
    for _ in range(3):
        p = _group(
            [
                sys.executable,
                "-c",
                "import sys,time\nf=open(sys.argv[1])\nprint(1,flush=True)\ntime.sleep(300)",
                str(log),
            ]
        )
        procs.append(p)
        assert p.stdout and p.stdout.readline()
    holding = {p.pid for p in procs[2:]}
    for comment in ("one", "two", HOSTILE[:13]):
        _cli(
            "--hosts",
            hosts,
            "silence",
            "add",
            "--host",
            "h1",
            "--for",
            "1h",
            "--comment",
            comment,
            "--json",
        )
    _night(time.time())

    async with (
        stdio_client(_server(hosts)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS | PLAN_TOOLS

        async def call(name: str, **kw) -> tuple[str, dict]:
            text = _text(await session.call_tool(name, kw))
            # the CLI's serialization: ASCII only, no raw control byte
            assert text.isascii() and "\x1b" not in text, name
            return text, json.loads(text)

        # fleet_status: `status --json`
        _, status = await call("fleet_status")
        want = _cli("--hosts", hosts, "status", "--json")
        assert (
            [h["name"] for h in status["hosts"]]
            == ["h1", "h2"]
            == [h["name"] for h in want["hosts"]]
        )
        assert status["fleet"] == want["fleet"] and status["hosts"][0]["reachable"] is True
        assert sorted(r["path"] for r in status["hosts"][0]["runs"]) == sorted(
            r["path"] for r in want["hosts"][0]["runs"]
        )
        assert status["hosts"][0]["left_out"]["runs"] == 0
        _, small = await call("fleet_status", limit=1)
        h1 = small["hosts"][0]
        assert len(h1["runs"]) == 1 and h1["left_out"]["runs"] == 3
        assert len(h1["schedules"]) <= 1 and h1["left_out"]["schedules"] >= 1

        # runs: bounded, the hostile name escaped by JSON and whole once parsed
        text, every = await call("runs", limit=500)
        assert {r["name"] for r in every["runs"]} == {"run-3", "run-10", HOSTILE, "run-\udcff"}
        assert every["left_out"] == 0 and "\\u001b[2J" in text
        _, two = await call("runs", limit=2)
        assert len(two["runs"]) == 2 and two["left_out"] == 2
        assert [r["name"] for r in two["runs"]] == [
            r["name"] for r in _cli("--hosts", hosts, "runs", "--json")["runs"]
        ][:2]

        # run_log: the last lines, each escaped as `logs` prints it
        _, tail = await call("run_log", host="h1", run="run-3", lines=3)
        assert tail["lines"] == [
            "step 298 loss=0.020",
            "step 299 loss=0.010",
            "\\x1b]52;c;SGk=\\x07 boom $(id)",
        ]
        _, missing = await call("run_log", host="h1", run="nope")
        assert missing["error"]["code"] == "no-run"
        _, unknown = await call("run_log", host="nowhere", run="run-3")
        assert unknown["error"]["code"] == "unknown-host"

        # run_log_grep: a literal string (its regex characters literal), a bounded regex, and
        # the last `lines` matches with a count of the earlier ones
        _, lit = await call("run_log_grep", host="h1", run="run-3", pattern="$(id)")
        assert lit["lines"] == ["\\x1b]52;c;SGk=\\x07 boom $(id)"] and lit["left_out"] == 0
        _, many = await call("run_log_grep", host="h1", run="run-3", pattern="loss=", lines=10)
        assert len(many["lines"]) == 10 and many["left_out"] == 290 and many["counted_all"]
        assert many["lines"][-1] == "step 299 loss=0.010"
        _, rx = await call(
            "run_log_grep",
            host="h1",
            run="run-3",
            pattern=r"^step 1\d\d loss",
            regex=True,
            lines=200,
        )
        assert len(rx["lines"]) == 100 and rx["left_out"] == 0
        _, bad = await call("run_log_grep", host="h1", run="run-3", pattern="(a+)+$", regex=True)
        assert bad["error"]["code"] == "bad-pattern" and "lines" not in bad

        # schedules: the hostile loops with why they are stray, as `schedules --json` says
        text, sched = await call("schedules", limit=500)
        ours = [s for s in sched["schedules"] if token in s["command"]]
        assert len(ours) == 4 and {s["host"] for s in ours} == {"h1", "h2"}
        assert all(s["command"].endswith(HOSTILE) and s["stray"] and s["why"] for s in ours)
        assert "\\u001b[2J" in text
        cli_ours = {
            (s["host"], s["id"]): s["why"]
            for s in _cli("--hosts", hosts, "schedules", "--json")["schedules"]
            if token in s["command"]
        }
        assert cli_ours == {(s["host"], s["id"]): s["why"] for s in ours}
        _, one = await call("schedules", host="h2", limit=1)
        assert len(one["schedules"]) == 1 and one["left_out"] >= 1
        assert one["schedules"][0]["host"] == "h2"

        # alerts: `alerts --json`, each with the silence holding it
        _, alerts = await call("alerts", limit=500)
        assert alerts["left_out"] == 0 and isinstance(alerts["alerts"], list)
        cli_alerts = _cli("--hosts", hosts, "alerts", "--json")["alerts"]
        assert {a["rule"] for a in alerts["alerts"]} == {a["rule"] for a in cli_alerts}
        assert all("silenced" in a and "severity" in a for a in alerts["alerts"])

        # silences: `silence list --json`, bounded
        _, sil = await call("silences", limit=2)
        assert len(sil["silences"]) == 2 and sil["left_out"] == 1
        cli_sil = _cli("silence", "list", "--json")["silences"]
        assert [s["id"] for s in sil["silences"]] == [s["id"] for s in cli_sil][:2]

        # history: the window's newest rows of each series, the figures of the whole window
        text, hist = await call("history", host="gx10", since_s=7 * 3600, rows=10)
        cli_hist = _cli("history", "gx10", "--since", "7h", "--json")
        gpu = hist["series"]["gpu"]["0:GPU-0"]
        assert len(gpu) == 10 and gpu == cli_hist["series"]["gpu"]["0:GPU-0"][-10:]
        assert (
            hist["left_out"]["rows"]["gpu"]["0:GPU-0"]
            == len(cli_hist["series"]["gpu"]["0:GPU-0"]) - 10
        )
        assert hist["figures"] == cli_hist["figures"]
        assert "/runs/run-\x1b[2J7" in hist["series"]["run"] and "\\u001b[2J7" in text
        _, nothing = await call("history", host="h1")
        assert nothing["series"]["gpu"] == {} and nothing["left_out"]["rows"] == {}

        # holders: the three processes holding the log, bounded
        _, held = await call("holders", host="h1", path=str(runs / "run-3"), limit=2)
        assert len(held["holders"]) == 2 and held["left_out"] == 1
        assert len(held["unreadable"]) <= 2 and held["unreadable_left_out"] >= 0
        assert {h["pid"] for h in held["holders"]} <= holding
        _, gone = await call("holders", host="h1", path=str(runs / "nope"))
        assert gone["error"]["code"] == "not-found"

        # gpu_holders: the card as `status --json` lists it, or why there is none
        _, card = await call("gpu_holders", host="h1", gpu=0)
        gpus = status["hosts"][0]["gpus"]
        if gpus:
            assert card["index"] == 0 and card["left_out"] >= 0
        else:
            assert card["error"]["code"] == "no-gpu"

        # wait_for_run: `wait --json`
        _, waited = await call("wait_for_run", host="h1", run="run-10", timeout_s=60)
        cli_wait = _cli("--hosts", hosts, "wait", "h1", "run-10", "--timeout", "60s", "--json")
        assert waited["result"] == cli_wait["result"] == "failed"
        _, none = await call("wait_for_run", host="h1", run="nope", timeout_s=5)
        assert none["error"]["code"] == "no-run"


def test_a_grep_pattern_is_literal_or_a_regex_that_cannot_backtrack_without_end():
    assert bounded_pattern("$(id) [x]", literal=True) == re.escape("$(id) [x]")
    for ok in (r"(?i)error.*cuda", r"step \d+/\d+ loss [0-9.]+", r"a{1,5}x|y", r"\.\[x\]"):
        assert bounded_pattern(ok, literal=False) == ok
    for bad in (
        "(a+)+b",  # a repeated group: exponential backtracking
        "(a|aa)*",
        "a**",
        r"(x)\1",  # a backreference
        "(?=x)",  # lookaround
        "a{1,1000}",
        ".*.*.*.*",  # four unbounded repetitions
        "[abc",
        "x{",
        "",
        "a" * 201,
    ):
        with pytest.raises(ValueError):
            bounded_pattern(bad, literal=False)
