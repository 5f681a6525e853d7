"""Stopping a loop stops what it started: no `sleep` (or orphan in its group) outlives a "stopped" loop."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.actions.schedules import check_removal, remove_schedule
from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.host.lib import procfs

LOCAL = HostConfig(name="local", local=True, python=sys.executable, command_timeout=20)


def kids_named(pid: int, name: str) -> list[tuple[int, int]]:
    return [(p, procfs.start_ticks(p)) for p in procfs.descendants(pid) if procfs.comm(p) == name]


def group_members(pgid: int) -> list[tuple[int, int]]:
    out = []
    for p in procfs.pids():
        st = procfs.stat(p)
        if st and st[2] == pgid and st[0] not in ("Z", "X"):
            out.append((p, st[3]))
    return out


def wait_until(cond, what: str):
    for _ in range(500):
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def started():
    """Processes a test starts; killed (and their whole group) afterwards whatever happened."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        mine = [(d, procfs.start_ticks(d)) for d in procfs.descendants(p.pid)]
        for pid, start in mine + (group_members(p.pid) if os.getpgid(0) != p.pid else []):
            if procfs.same_process(pid, start):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        if p.poll() is None:
            p.kill()
        p.wait()


def loop(p: subprocess.Popen) -> Schedule:
    return Schedule(
        id=f"loop-{p.pid}",
        host="local",
        kind="loop",
        user="root",
        spec="while-loop",
        command="loop",
        source=f"/proc/{p.pid}",
        pid=p.pid,
        start_time=procfs.start_ticks(p.pid),
    )


@pytest.mark.parametrize("own_group", [True, False])
@pytest.mark.parametrize(
    "script, signals",
    [
        ("while true; do sleep 300; done", ("SIGTERM",)),
        ("trap '' TERM; while true; do sleep 300; done", ("SIGTERM", "SIGKILL")),
    ],
)
async def test_sleep_child_does_not_outlive_the_stopped_loop(started, own_group, script, signals):
    p = subprocess.Popen(["bash", "-c", script], start_new_session=own_group)
    started.append(p)
    (sleeper,) = wait_until(lambda: kids_named(p.pid, "sleep"), "the loop's first sleep")
    s = loop(p)
    check = await check_removal(HostLink(LOCAL), s)
    assert check.ok and [c["pid"] for c in check.children] == [
        sleeper[0]
    ]  # named before confirming
    rep = await remove_schedule(HostLink(LOCAL), s, s.id, grace=0.5)
    assert rep.ok, rep
    assert rep.signals == signals
    assert str(sleeper[0]) in rep.message and "none is left" in rep.message
    p.wait(timeout=10)
    # gone as an identity (pid + start time), not merely "some pid"
    assert not procfs.same_process(*sleeper)


async def test_orphan_left_in_the_loops_group_is_stopped_too(started):
    # `(sleep 300 &)`: the sleep's parent subshell exits at once, so it is no descendant any more,
    # but it stays in the loop's process group
    p = subprocess.Popen(
        ["bash", "-c", "(sleep 300 &); while true; do sleep 0.2; done"], start_new_session=True
    )
    started.append(p)
    orphan = wait_until(
        lambda: [
            m
            for m in group_members(p.pid)
            if procfs.comm(m[0]) == "sleep"
            and procfs.ppid(m[0]) != p.pid
            and m[0] not in procfs.descendants(p.pid)
        ],
        "the orphaned sleep",
    )[0]
    s = loop(p)
    rep = await remove_schedule(HostLink(LOCAL), s, s.id, grace=0.5)
    assert rep.ok, rep
    p.wait(timeout=10)
    assert not procfs.same_process(*orphan)
    assert group_members(p.pid) == []


async def test_a_loop_that_respawns_faster_than_it_dies_leaves_nothing(started):
    # SIGTERM ignored and a new child every few ms: whatever it started before SIGKILL must go
    p = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; while true; do sleep 300 & sleep 0.01; done"],
        start_new_session=True,
    )
    started.append(p)
    wait_until(lambda: len(kids_named(p.pid, "sleep")) >= 3, "a few background sleeps")
    s = loop(p)
    rep = await remove_schedule(HostLink(LOCAL), s, s.id, grace=0.3)
    assert rep.ok, rep
    p.wait(timeout=10)
    assert group_members(p.pid) == []
    assert "SIGKILL" in rep.signals


async def test_helper_never_stops_its_own_parents():
    s = Schedule(
        id="me",
        host="local",
        kind="loop",
        user="root",
        spec="x",
        command="x",
        source="x",
        pid=os.getpid(),
        start_time=procfs.start_ticks(os.getpid()),
    )
    rep = await remove_schedule(HostLink(LOCAL), s, "me")
    assert not rep.ok and rep.reason_code == "unsupported" and "parents" in rep.message
    assert Path(f"/proc/{os.getpid()}").exists()


@pytest.mark.skipif(
    os.geteuid() != 0
    or not os.path.exists("/usr/bin/setpriv")
    or not os.path.exists("/usr/bin/python3"),
    reason="needs root, setpriv and /usr/bin/python3 to run the helper as another user",
)
def test_a_loop_the_helper_may_not_signal_is_refused_and_left_running(started):
    import json

    from fleetdeck.backend.actions.schedules import REMOTE
    from fleetdeck.backend.fleet.link.bundle import bundle

    p = subprocess.Popen(["bash", "-c", "while true; do sleep 300; done"], start_new_session=True)
    started.append(p)
    (sleeper,) = wait_until(lambda: kids_named(p.pid, "sleep"), "the loop's first sleep")
    req = {
        "op": "apply",
        "grace": 0.5,
        "schedule": {"kind": "loop", "pid": p.pid, "start_time": procfs.start_ticks(p.pid)},
    }
    # the helper as `nobody`: it may read /proc but signal nothing of root's
    out = subprocess.run(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            bundle(REMOTE),
        ],
        input=json.dumps(req).encode(),
        capture_output=True,
        timeout=60,
        cwd="/",
    )
    ans = json.loads(out.stdout)
    assert ans["ok"] is False and ans["error"]["code"] == "permission-denied", ans
    assert procfs.same_process(p.pid, procfs.start_ticks(p.pid)) and procfs.same_process(*sleeper)
    assert procfs.stat(p.pid)[0] != "T"  # not left stopped
