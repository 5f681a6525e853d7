"""Polling a real loopback fleet: all up, one killed mid-session, a hung probe, 100 hosts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.acks import Acks
from fleetdeck.backend.fleet.config import load_fleet, parse_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.models import HostSnapshot, Schedule
from fleetdeck.backend.fleet.poller import Poller, poll_fleet, probe_source
from fleetdeck.backend.fleet.schedule_verdict import mark_stray

pytestmark = pytest.mark.sshd


async def test_all_hosts_up_and_one_poll_is_one_round_trip_on_a_resident_probe(
    sshd_fleet, fleet_file
):
    poller = Poller(load_fleet(str(fleet_file)))
    try:
        first = await poller.poll()
        assert [h.name for h in first.hosts] == ["h1", "h2", "h3"]
        assert all(h.reachable for h in first.hosts), [h.error for h in first.hosts]
        probes = dict(poller._probes)
        second = await poller.poll()
        assert all(h.reachable for h in second.hosts)
        # the same resident probe processes answered the second poll
        assert all(poller._probes[n] is probes[n] for n in probes)
        for h in second.hosts:
            assert h.memory_total_bytes > 0 and h.latency_ms is not None
            assert [d.path for d in h.disks] == [str(sshd_fleet.hosts[h.name].runs)]
    finally:
        await poller.close()


async def test_a_hosts_probe_comes_from_the_pollers_open_probe(sshd_fleet, fleet_file):
    """`open_probe` is asked for a host's probe when the poller holds none: once a host at the
    first poll, not at the next; a host it cannot open one on is not reachable, with its error,
    and asked again at the next poll."""
    opened: list[str] = []
    source = probe_source()

    async def open_probe(host):
        opened.append(host.name)
        if host.name == "h2":
            raise HostError(host.name, "no probe on this one", "probe")
        return await poller.link(host.name).start_helper(source, ["--resident"], what="probe")

    poller = Poller(load_fleet(str(fleet_file)), open_probe=open_probe)
    try:
        for n in (1, 2):
            by = {h.name: h for h in (await poller.poll()).hosts}
            assert by["h1"].reachable and by["h3"].reachable, [h.error for h in by.values()]
            assert (by["h2"].reachable, by["h2"].error_code) == (False, "probe")
            assert by["h2"].error == "no probe on this one"
            assert [opened.count(h) for h in ("h1", "h2", "h3")] == [1, n, 1]
    finally:
        await poller.close()


async def test_host_killed_mid_session_reports_why_and_others_answer(spare_fleet, tmp_path):
    for n in ("a", "b", "c"):
        spare_fleet.add(n)
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"connect_timeout": 2})
    poller = Poller(load_fleet(str(path)))
    try:
        assert all(h.reachable for h in (await poller.poll()).hosts)
        spare_fleet.kill("b")
        t0 = time.monotonic()
        snap = await poller.poll()
        elapsed = time.monotonic() - t0
        by = {h.name: h for h in snap.hosts}
        assert by["a"].reachable and by["c"].reachable
        assert not by["b"].reachable and by["b"].error
        # the connect timeout (2 s) ends it, not the command timeout (30 s): a bound between the two,
        # generous so that a loaded machine's scheduling never fails it
        assert elapsed < 20, elapsed
        assert poller.last_good("b") is not None  # its last good figures are kept
        spare_fleet.start("b")
        for _ in range(10):  # reconnect backoff is 1, 2, 4 s
            snap = await poller.poll(["b"])
            if snap.hosts[0].reachable:
                break
            time.sleep(1)
        assert snap.hosts[0].reachable, snap.hosts[0].error
    finally:
        await poller.close()


async def test_hung_probe_is_cut_off_at_the_command_timeout(sshd_fleet, tmp_path):
    hang = tmp_path / "hang-python"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(0o755)
    path = sshd_fleet.write_fleet(
        tmp_path / "hosts.toml",
        names=["h1", "h2"],
        per_host={"h2": {"python": str(hang), "command_timeout": 1.5}},
    )
    snap = await poll_fleet(load_fleet(str(path)))
    by = {h.name: h for h in snap.hosts}
    assert by["h1"].reachable
    assert not by["h2"].reachable and "did not answer within 1.5s" in by["h2"].error


async def test_a_hundred_hosts_parse_and_poll(sshd_fleet, tmp_path):
    names = list(sshd_fleet.hosts)
    body = [
        sshd_fleet.fleet_toml(names=[], defaults={"command_timeout": 120, "connect_timeout": 30})
    ]
    for i in range(100):
        h = sshd_fleet.hosts[names[i % len(names)]]
        body.append(
            f'[hosts.node-{i:03d}]\naddress = "127.0.0.1"\nport = {h.port}\nruns = ["{h.runs}"]\n'
        )
    path = tmp_path / "hosts.toml"
    path.write_text("\n".join(body))
    fleet = load_fleet(str(path))
    assert len(fleet.hosts) == 100
    snap = await poll_fleet(fleet)
    down = [(h.name, h.error) for h in snap.hosts if not h.reachable]
    assert not down
    assert len(snap.hosts) == 100


def test_stray_is_decided_fleet_wide():
    def sched(sid, host, cmd, reasons=(), active=True):
        return Schedule(
            id=sid,
            host=host,
            kind="crontab",
            user="u",
            spec="37 * * * *",
            command=cmd,
            source="crontab",
            reasons=tuple(reasons),
            active=active,
        )

    a = HostSnapshot(
        name="a",
        reachable=True,
        schedules=(
            sched("1", "a", "check  on the run"),
            sched("2", "a", "/gone/x.sh", ["dead-target"]),
        ),
    )
    b = HostSnapshot(
        name="b",
        reachable=True,
        schedules=(
            sched("3", "b", "check on the run"),
            sched("4", "b", "backup"),
            sched("5", "b", "backup", active=False),
        ),
    )
    # nothing acknowledged: the twins on two hosts are duplicates, the inactive twin is not one
    fresh = {s.id: s for h in mark_stray([a, b], acks=Acks()) for s in h.schedules}
    assert fresh["1"].reasons == ("unacknowledged", "duplicate") and fresh["1"].stray
    assert fresh["3"].reasons == ("unacknowledged", "duplicate")
    assert fresh["4"].reasons == ("unacknowledged",)  # the inactive twin does not count
    assert fresh["2"].reasons == ("dead-target", "unacknowledged")
    # acknowledged: the operator has judged them; only what acknowledging cannot fix stays
    out = {
        s.id: s
        for h in mark_stray([a, b], acks=Acks(everywhere=frozenset("12345")))
        for s in h.schedules
    }
    assert not out["1"].stray and not out["3"].stray and not out["4"].stray
    assert out["2"].reasons == ("dead-target",) and out["2"].stray
    # the verdict on b is the same whether a is shown or not, as long as both were polled
    only_b = {
        s.id: s for h in mark_stray([a, b], acks=Acks()) if h.name == "b" for s in h.schedules
    }
    assert only_b["3"].reasons == fresh["3"].reasons


def test_status_cli_json_and_exit_codes(sshd_fleet, tmp_path):
    path = sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1", "h3"])
    env = {**os.environ}
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [h["name"] for h in doc["hosts"]] == ["h1", "h3"]
    for key in (
        "reachable",
        "error",
        "latency_ms",
        "memory",
        "load1",
        "gpus",
        "disks",
        "runs",
        "schedules",
    ):
        assert key in doc["hosts"][0]
    # a host that refuses: status still prints it, and exits 1
    bad = tmp_path / "bad.toml"
    bad.write_text(path.read_text() + '\n[hosts.nowhere]\naddress = "127.0.0.1"\nport = 1\n')
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(bad), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    down = [h for h in doc["hosts"] if h["name"] == "nowhere"][0]
    assert down["reachable"] is False and "nowhere" in p.stderr and down["error"]
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0 and "h1" in p.stdout


def test_local_fleet_polls_this_machine(tmp_path):
    fleet = parse_fleet(f'[hosts.local]\nlocal = true\nruns = ["{tmp_path}"]\n', "t.toml")
    import asyncio

    snap = asyncio.run(poll_fleet(fleet))
    assert snap.hosts[0].reachable, snap.hosts[0].error
    assert Path(snap.hosts[0].disks[0].path) == tmp_path


# -- a probe that hangs, a chatty shell, a refused login ------------------------------------
HUNG_PROBE = "import sys\nsys.stdin.readline()\nwhile True:\n    pass\n"


def _helpers_below(pid: int) -> list[int]:
    """fleetdeck helpers (the boot line in their argv) among the processes below `pid`."""
    from support.sshfleet import _descendants

    out = []
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if b"fleetdeck-helper" in f.read():
                    out.append(p)
        except OSError:
            pass
    return out


async def test_a_probe_that_timed_out_is_killed_on_the_host(spare_fleet, tmp_path):
    spare_fleet.add("hangs")
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"command_timeout": 2})
    sshd = spare_fleet.hosts["hangs"].proc.pid
    async with Poller(load_fleet(str(path)), probe=HUNG_PROBE) as poller:
        snap = await poller.poll()
        (h,) = snap.hosts
        assert not h.reachable and h.error_code == "timeout"
        assert h.error == "probe did not answer within 2s"
        for _ in range(100):  # a bounded wait for the host to reap it, not a timing assertion
            if not _helpers_below(sshd):
                break
            await asyncio.sleep(0.1)
        assert _helpers_below(sshd) == [], "the hung probe is still running on the host"
        assert poller.link("hangs").state == "up"  # the connection is kept for the next poll


async def test_a_chatty_login_shell_is_named_in_the_snapshot(spare_fleet, tmp_path):
    rc = tmp_path / "noisy-login"
    rc.write_text('#!/bin/sh\necho "Welcome to chatty"\nexec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
    rc.chmod(0o755)
    spare_fleet.add("chatty", sshd_extra=(f"ForceCommand {rc}",))
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    async with Poller(load_fleet(str(path))) as poller:
        (h,) = (await poller.poll()).hosts
    assert not h.reachable and h.error_code == "shell-output"
    assert h.error == "the login shell printed text before the probe's answer: Welcome to chatty"


async def test_a_refused_login_is_reported_as_auth_not_down(spare_fleet, tmp_path):
    from support.sshfleet import keygen

    spare_fleet.add("locked")
    stranger = tmp_path / "stranger"
    keygen(stranger)
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"client_keys": [str(stranger)]}
    )
    async with Poller(load_fleet(str(path))) as poller:
        first = (await poller.poll()).hosts[0]
        second = (await poller.poll()).hosts[0]
    assert first.error_code == second.error_code == "auth"
    assert "not retried until" in second.error
    assert second.to_json()["error_code"] == "auth"


def _mute_host(tmp_path: Path) -> tuple[object, str]:
    """A TCP listener that accepts connections and never speaks (no SSH banner), and its
    [hosts.mute] table: a connect there waits for its whole connect timeout (60 s)."""
    import socket

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    return mute, (
        f'[hosts.mute]\naddress = "127.0.0.1"\nport = {mute.getsockname()[1]}\nconnect_timeout = 60\n'
        f'command_timeout = 60\nknown_hosts = "{tmp_path / "kh"}"\n'
    )


async def test_close_ends_within_seconds_beside_a_silent_host_a_mute_one_and_cpu_hogs(
    spare_fleet, tmp_path
):
    """A host that answered and then went silent with its connection open (its sshd and all
    below it SIGSTOPped), a listener that accepts and never speaks, and a local host, a poll
    in flight on each, the machine loaded: close() ends within 10 s (it takes well under 2 s)
    where a wait on either peer would never end. A poll after it is refused."""
    from fleetdeck.backend.fleet.poller import PollerClosed

    from support.busy import hogs

    spare_fleet.add("quiet")
    mute, mute_toml = _mute_host(tmp_path)
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"command_timeout": 60})
    path.write_text(
        path.read_text()
        + mute_toml
        + f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{tmp_path}"]\n'
    )
    poller = Poller(load_fleet(str(path)))
    try:
        first = await poller.poll(["quiet", "local"])
        assert all(h.reachable for h in first.hosts), [h.error for h in first.hosts]
        spare_fleet.pause("quiet")
        with hogs():
            polling = asyncio.ensure_future(poller.poll())
            await asyncio.sleep(1.0)  # the question is on its way to "quiet"; "mute" is connecting
            assert not polling.done()
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(10):
                    await poller.close()
            except TimeoutError:
                raise AssertionError(
                    f"close() still waiting after {time.monotonic() - t0:.1f}s"
                ) from None
            took = time.monotonic() - t0
        print(f"Poller.close with a silent host, a mute one and CPU hogs: {took:.2f}s")
        await asyncio.wait([polling], timeout=5)
        assert polling.done(), f"the poll in flight still runs after close() ({took:.2f}s)"
        with pytest.raises(PollerClosed):
            await poller.poll()
    finally:
        await poller.close()
        spare_fleet.resume("quiet")
        mute.close()
