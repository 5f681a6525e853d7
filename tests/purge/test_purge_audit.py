"""No purge without its audit record: the `started` record is written whole and fsynced before
anything is touched, or the purge is refused `not-audited` with a sentence (a full tmpfs for
ENOSPC, RLIMIT_FSIZE for short writes and EFBIG); a result record that cannot be written makes
the command exit 1 with the result still printed; the log never keeps a torn record."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet import statedir
from fleetdeck.cli.main import main

from support.fullfs import full_tmpfs
from support.purge import ckpt, local_host, make_run, plan_for, purge


@pytest.fixture
def local(tmp_path):
    """(host config of this machine, its runs root)."""
    return local_host(tmp_path)


def purge_records() -> list[dict]:
    return [r for r in audit.read_audit() if r.get("action") == "purge"]


@pytest.fixture
def full_state_dir(tmp_path, monkeypatch):
    """XDG_STATE_HOME on a small real tmpfs whose every block is taken."""

    def prepare(mnt):
        monkeypatch.setenv("XDG_STATE_HOME", str(mnt))
        statedir.state_dir()

    with full_tmpfs(tmp_path / "state-fs", prepare) as mnt:
        yield mnt


@pytest.mark.root
async def test_full_disk_refuses_the_purge_before_anything_is_touched(local, full_state_dir):
    host_cfg, runs = local
    run = make_run(runs, "run full-disk")
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.ok
    report = await purge(host_cfg, plan)
    assert not report.deleted and (ckpt(run) / "optimizer.pt").is_file()
    assert report.paths[0].refused == ["not-audited"]
    msg = report.paths[0].refusals[0].message
    assert "the disk is full" in msg and "nothing was touched" in msg and "audit log" in msg
    assert report.audit_error and "No space left on device" in report.audit_error
    assert purge_records() == []


@pytest.mark.root
def test_full_disk_makes_cli_purge_and_dry_run_exit_1_with_a_sentence(
    local, full_state_dir, tmp_path, capsys
):
    host_cfg, runs = local
    p = str(ckpt(make_run(runs, "run cli-full")))
    fleet = tmp_path / "runs-fleet.toml"
    fleet.write_text(
        f'[hosts.local]\nlocal = true\nruns = ["{runs}"]\npython = "{sys.executable}"\n'
    )
    for extra in (["--dry-run"], [f"--confirm={p}"]):
        rc = main(["--hosts", str(fleet), "purge", "local", p, "--json", *extra])
        out = capsys.readouterr()
        assert rc == 1 and "Traceback" not in out.err
        doc = json.loads(out.out)  # the result is printed all the same
        assert "the disk is full" in doc["audit_error"] and "the disk is full" in out.err
        assert Path(p).is_dir()
    assert doc["paths"][0]["refused"] == ["not-audited"] and doc["deleted"] is False


def _in_child(code: str, limit: int | None, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run Python `code` in a child whose files may not grow past `limit` bytes."""

    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=cap,
        timeout=120,
    )


def test_a_short_write_then_efbig_is_an_error_and_leaves_no_torn_record(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "st")}
    first = _in_child(
        "from fleetdeck.backend.actions import audit; audit.audit('mirror', 'h', 'done', n=1)",
        None,
        env,
    )
    assert first.returncode == 0, first.stderr
    log = tmp_path / "st" / "fleetdeck" / "audit.jsonl"
    size = log.stat().st_size
    # room for 10 more bytes: the first write of the record is cut short, the next one fails
    code = (
        "from fleetdeck.backend.actions import audit\n"
        "try:\n"
        "    audit.audit('purge', 'h', 'started', note='x' * 300)\n"
        "except audit.AuditError as e:\n"
        "    print('refused:', e.message)\n"
        "else:\n"
        "    print('written')\n"
    )
    out = _in_child(code, size + 10, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused:") and "largest size this process may write" in out.stdout
    assert log.stat().st_size == size  # the 10 bytes that went in were cut off again
    assert [json.loads(line)["action"] for line in log.read_bytes().splitlines()] == ["mirror"]


def _fleet(tmp_path: Path, runs: Path) -> Path:
    f = tmp_path / "hosts.toml"
    f.write_text(f'[hosts.local]\nlocal = true\nruns = ["{runs}"]\npython = "{sys.executable}"\n')
    return f


def test_a_result_record_that_cannot_be_written_exits_1_with_the_result_printed(tmp_path):
    runs = tmp_path / "runs"
    fleet = _fleet(tmp_path, runs)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "st")}
    env.pop("FLEETDECK_HOSTS", None)

    def cli(path: Path, limit: int | None) -> subprocess.CompletedProcess:
        argv = [
            sys.executable,
            "-m",
            "fleetdeck.cli.main",
            "--hosts",
            str(fleet),
            "purge",
            "local",
            str(path),
            f"--confirm={path}",
            "--json",
        ]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
            if limit
            else None,
        )

    # a first purge of a run shaped the same way measures how long a `started` record is
    a, b = make_run(runs, "run-a"), make_run(runs, "run-b")
    first = cli(ckpt(a), None)
    assert first.returncode == 0, first.stderr
    log = tmp_path / "st" / "fleetdeck" / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    started = next(len(x) for x in lines if json.loads(x)["result"] == "started")
    size = log.stat().st_size
    # room for the `started` record (give or take a digit), not for the longer `done` record
    out = cli(ckpt(b), size + started + 40)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["deleted"] is True and doc["verified"] is True and not ckpt(b).exists()
    assert "audit log" in doc["audit_error"] and "could not be written" in doc["audit_error"]
    assert "could not be written" in out.stderr and "Traceback" not in out.stderr
    records = [json.loads(x) for x in log.read_bytes().splitlines()]  # every line whole
    assert [r["result"] for r in records] == ["started", "done", "started"]
