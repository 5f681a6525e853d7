"""`fleetdeck audit`: refused and done actions recorded, newest first, a torn last line skipped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.schedules import remove_schedule
from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Schedule

LOCAL = HostConfig(name="local", local=True, python=sys.executable, command_timeout=20)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run `fleetdeck ARGV` in this process; (exit status, stdout, stderr)."""
    from fleetdeck.cli.main import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


async def test_refused_and_done_removals_are_listed_newest_first(capsys):
    p = subprocess.Popen(["bash", "-c", "while true; do sleep 0.2; done"], start_new_session=True)
    try:
        s = Schedule(
            id="loop $(x)",
            host="local",
            kind="loop",
            user="root",
            spec="while true",
            command="bash -c loop",
            source="process",
            pid=p.pid,
            start_time=start_time(p.pid),
        )
        refused = await remove_schedule(HostLink(LOCAL), s, "loop")
        assert refused.reason_code == "not-confirmed"
        assert p.poll() is None
        done = await remove_schedule(HostLink(LOCAL), s, "loop $(x)")
        assert done.ok, done
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    rc, out, _ = run_cli(["audit", "--json"], capsys)
    assert rc == 0
    entries = json.loads(out)["entries"]
    assert [(e["action"], e["result"]) for e in entries] == [
        ("schedule-remove", "done"),
        ("schedule-remove", "started"),
        ("schedule-remove", "refused"),
    ]
    assert [e["confirmation"] for e in entries] == ["loop $(x)", "loop $(x)", "loop"]
    assert entries[0]["signals"] == ["SIGTERM"] and entries[2]["reason_code"] == "not-confirmed"
    assert all(e["host"] == "local" and e["user"] and e["time"] for e in entries)
    assert entries[0]["ts"] >= entries[1]["ts"] >= entries[2]["ts"]


def test_torn_last_line_is_skipped_and_table_shows_the_rest(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    audit.audit(
        "purge",
        "gx10",
        "refused",
        paths=["/tank/run-1/checkpoints/checkpoint-25"],
        reason_code="in-use",
        message="a process holds a file open",
    )
    time.sleep(0.01)
    audit.audit("schedule-ack", None, "done", ids=["abc123"])
    with open(audit.audit_path(), "ab") as f:  # a crash in the middle of writing a record
        f.write(b'{"time": "2026-11-29T17:00:00+0000", "action": "purge", "resu')
    rc, out, _ = run_cli(["audit", "--json"], capsys)
    assert rc == 0
    assert [e["action"] for e in json.loads(out)["entries"]] == ["schedule-ack", "purge"]
    rc, out, _ = run_cli(["audit"], capsys)
    assert rc == 0
    assert out.index("schedule-ack") < out.index("purge")
    assert "in-use" in out and "checkpoint-25" in out and "abc123" in out


def test_empty_log(capsys):
    rc, out, _ = run_cli(["audit", "--json"], capsys)
    assert rc == 0 and json.loads(out) == {"entries": []}
    rc, out, _ = run_cli(["audit"], capsys)
    assert rc == 0 and "empty" in out
