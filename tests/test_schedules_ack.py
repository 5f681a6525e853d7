"""Acknowledging under concurrency, per host and on every host; the verdict is fleet-wide."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_schedules_cli import install_crontab, local_fleet, root_crontab, run_cli  # noqa: F401

from fleetdeck.backend import acks
from fleetdeck.backend.models import HostSnapshot, Schedule

needs_crontab = pytest.mark.skipif(shutil.which("crontab") is None, reason="cron's crontab is not installed")
TEN = [f"{i} 5 * * * /usr/bin/true ack-race-{i}" for i in range(10)]
LINE = "41 7 * * * /usr/bin/true fleet-wide-verdict-7c1"


def fleetdeck(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fleetdeck.tui.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ))


@needs_crontab
@pytest.mark.root
def test_ten_parallel_ack_processes_keep_all_ten(root_crontab, tmp_path, capsys):  # noqa: F811
    install_crontab("".join(x + "\n" for x in TEN), tmp_path)
    hosts = local_fleet(tmp_path)
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    assert rc == 0, err
    ids = [s["id"] for s in json.loads(out)["schedules"] if s.get("raw") in TEN]
    assert len(ids) == 10
    procs = [fleetdeck("--hosts", hosts, "schedules", "ack", i) for i in ids]
    for p in procs:
        o, e = p.communicate(timeout=300)
        assert p.returncode == 0, e.decode()
    stored = acks.load_acks()
    assert all(stored.covers("local", i) for i in ids), stored


def _ack_many(base: str, n: int) -> None:
    for k in range(n):
        acks.acknowledge(on_host=[("h", f"{base}-{k}")])


def test_concurrent_acknowledge_calls_lose_nothing():
    # ten processes, each a read-modify-write storm: without the lock most ids are lost
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_ack_many, args=(f"p{i}", 30)) for i in range(10)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    stored = acks.load_acks()
    assert len(stored.on_host) == 300
    assert not list(Path(acks.acks_path()).parent.glob(".acknowledged.json.*.tmp"))


def test_old_acknowledgement_files_still_count_on_every_host():
    acks.acks_path().write_text(json.dumps({"ids": ["c-1"]}))
    got = acks.load_acks()
    assert got.covers("any-host", "c-1") and not got.covers("any-host", "c-2")
    acks.acknowledge(on_host=[("h2", "c-2")])
    assert acks.load_acks().covers("x", "c-1") and acks.load_acks().covers("h2", "c-2")


def test_verdict_acknowledged_clears_duplicate_and_system_is_never_stray():
    def sched(sid: str, host: str, cmd: str, **kw) -> Schedule:
        return Schedule(id=sid, host=host, kind="crontab", user="u", spec="37 * * * *", command=cmd,
                        source="crontab", **kw)

    a = HostSnapshot(name="a", reachable=True, schedules=(
        sched("c-1", "a", "check  on the run"), sched("c-2", "a", "/gone/x.sh", reasons=("dead-target",)),
        sched("c-3", "a", "run-parts /etc/cron.daily", system=True)))
    b = HostSnapshot(name="b", reachable=True, schedules=(
        sched("c-1", "b", "check on the run"), sched("c-4", "b", "run-parts /etc/cron.daily")))
    got = acks.Acks(on_host=frozenset({("a", "c-1"), ("a", "c-2")}))
    out = {(s.host, s.id): s for h in acks.mark_stray([a, b], got) for s in h.schedules}
    assert out["a", "c-1"].reasons == () and not out["a", "c-1"].stray  # acknowledged: duplicate cleared
    assert out["b", "c-1"].reasons == ("unacknowledged", "duplicate")  # the same id on b is b's own
    assert out["a", "c-2"].reasons == ("dead-target",) and out["a", "c-2"].stray  # a missing path stays
    assert not out["a", "c-3"].stray and out["a", "c-3"].reasons == ()
    assert out["b", "c-4"].reasons == ("unacknowledged",)  # a system twin makes nothing a duplicate
    order = [(s.host, s.id) for s in acks.stray_first(out.values())]
    assert order[0] == ("a", "c-2") and order[-1] == ("a", "c-3")
    assert acks.why(out["b", "c-1"], out.values()) == "the same command runs 1 more time (on a)"
    everywhere = {(s.host, s.id): s for h in acks.mark_stray([a, b], acks.Acks(everywhere=frozenset({"c-1"})))
                  for s in h.schedules}
    assert not everywhere["a", "c-1"].stray and not everywhere["b", "c-1"].stray


@needs_crontab
@pytest.mark.sshd
@pytest.mark.root
def test_verdict_is_fleet_wide_and_ack_per_host_or_all_hosts(root_crontab, sshd_fleet, tmp_path, capsys):  # noqa: F811
    # h1 and h2 are two sshd hosts on this one machine: the same crontab line is listed on both
    install_crontab(LINE + "\n", tmp_path)
    hosts = str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1", "h2"]))

    def entries(*extra: str) -> dict[str, dict]:
        rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json", *extra], capsys)
        assert rc == 0, err
        return {s["host"]: s for s in json.loads(out)["schedules"] if s.get("raw") == LINE}

    both = entries()
    assert set(both) == {"h1", "h2"} and both["h1"]["id"] == both["h2"]["id"]
    sid = both["h1"]["id"]
    assert both["h2"]["reasons"] == ["unacknowledged", "duplicate"]
    assert "the same command runs 1 more time (on h1)" == both["h2"]["why"]
    only_h2 = entries("--host", "h2")
    assert set(only_h2) == {"h2"} and only_h2["h2"]["reasons"] == both["h2"]["reasons"]  # --host changes nothing

    rc, _, err = run_cli(["--hosts", hosts, "schedules", "ack", sid], capsys)
    assert rc == 1 and "h1, h2" in err and "--all-hosts" in err and "Traceback" not in err
    assert acks.load_acks() == acks.Acks()

    rc, _, err = run_cli(["--hosts", hosts, "schedules", "ack", sid, "--host", "h1"], capsys)
    assert rc == 0, err
    now = entries()
    assert now["h1"]["reasons"] == [] and not now["h1"]["stray"]
    assert now["h2"]["reasons"] == ["unacknowledged", "duplicate"]

    rc, _, err = run_cli(["--hosts", hosts, "schedules", "ack", sid, "--all-hosts"], capsys)
    assert rc == 0, err
    now = entries()
    assert not now["h1"]["stray"] and not now["h2"]["stray"]
    assert acks.load_acks().covers("h3", sid)  # a host added later is covered too
