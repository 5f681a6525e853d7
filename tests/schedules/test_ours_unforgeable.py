"""fleetdeck knows its own processes by what no other process can forge: descent from the session
the controller opened (the sshd process of its connection, by pid and start time), never by an
environment variable or a name.

A hostile loop copies every marker it can read: `FLEETDECK_HELPER=1`, the whole environment of a
running fleetdeck helper (readable here: the tests run as that helper's user), the helper's own
argv (`python -c <boot line> --resident --fleetdeck-session=PID:START` naming the probe's sshd).
Over a real sshd host it is still listed as a loop, flagged unacknowledged, held-by in `holders`,
and stopped by `schedules remove` (never refused as `ours`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fleetdeck.backend.fleet.link.boot import BOOT
from fleetdeck.backend.host.lib import procfs

from support.cli import run_cli

pytestmark = pytest.mark.sshd


def _a_probe_of(root: str) -> tuple[int, bytes] | None:
    """(pid, environ) of a running fleetdeck helper, by its boot line in argv (tests only)."""
    for pid in procfs.pids():
        try:
            raw = procfs.read_bytes(f"/proc/{pid}/cmdline")
            if b"fleetdeck-helper" in raw and b"--resident" in raw:
                return pid, procfs.read_bytes(f"/proc/{pid}/environ")
        except OSError:
            continue
    return None


def test_a_loop_that_copies_every_marker_is_still_listed_flagged_held_and_stoppable(
    sshd_fleet, tmp_path, capsys
):
    hosts = str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"]))
    # one poll first, so a helper of this controller is running to copy from
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--host", "h1", "--json"], capsys)
    assert rc == 0, err
    env = dict(os.environ, FLEETDECK_HELPER="1")
    found = _a_probe_of(str(sshd_fleet.hosts["h1"].runs))
    if found is not None:
        for kv in found[1].split(b"\0"):
            k, sep, v = kv.partition(b"=")
            if sep:
                env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    held = sshd_fleet.hosts["h1"].runs / "held.txt"
    held.write_text("x")
    anchor = procfs.session_argv()  # a session arg naming a real process, forged on argv
    script = f"exec 3<{held}; while true; do sleep 0.2; done # inform when ready"
    p = subprocess.Popen(
        ["bash", "-c", script, BOOT[:40], "--resident", "--tied", *anchor],
        env=env,
        start_new_session=True,
    )
    try:
        rc, out, err = run_cli(["--hosts", hosts, "schedules", "--host", "h1", "--json"], capsys)
        assert rc == 0, err
        mine = [
            s for s in json.loads(out)["schedules"] if s["kind"] == "loop" and s["pid"] == p.pid
        ]
        assert mine, "a loop that copied the helper marker vanished from the listing"
        (s,) = mine
        assert not s.get("acknowledged"), s

        rc, out, err = run_cli(["--hosts", hosts, "holders", "h1", str(held), "--json"], capsys)
        assert rc in (0, 1), err
        assert p.pid in {h["pid"] for h in json.loads(out)["holders"]}, out

        rc, out, err = run_cli(
            [
                "--hosts",
                hosts,
                "schedules",
                "remove",
                "h1",
                s["id"],
                "--confirm",
                s["id"],
                "--grace",
                "0.5",
                "--json",
            ],
            capsys,
        )
        assert rc == 0, err
        assert "ours" not in err
        assert p.wait(timeout=10) is not None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_session_rule_itself(tmp_path):
    """`in_session` is true for a child of the named process and false for anything else; a
    session arg naming a process that is not an ancestor is no session."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = (os.getpid(), procfs.start_ticks(os.getpid()))
        assert procfs.in_session(child.pid, me)
        assert not procfs.in_session(child.pid, (me[0], me[1] + 1))  # same pid, another start
        assert not procfs.in_session(os.getpid(), me)  # itself is not its own descendant
        stranger = (child.pid, procfs.start_ticks(child.pid))
        assert procfs.session([f"{procfs.SESSION_ARG}{stranger[0]}:{stranger[1]}"]) is None
        assert procfs.session(procfs.session_argv()) is None  # itself is not its own ancestor
    finally:
        child.kill()
        child.wait()


def test_a_helper_the_controller_names_by_pid_and_start_is_ours_and_nothing_else_is():
    """A mirror's helpers run on a connection of their own: the controller names them to the
    probe by pid and start time (`fleet.link.own`); a wrong start time names nothing."""
    from fleetdeck.backend.fleet.config import HostConfig
    from fleetdeck.backend.fleet.link import own
    from fleetdeck.backend.fleet.poller import probe_request

    from support.probe import probe

    p = subprocess.Popen(["bash", "-c", "while true; do sleep 0.2; done"], start_new_session=True)
    try:
        start = procfs.start_ticks(p.pid)

        def loops(req):
            return {s["pid"] for s in probe(req)["schedules"] if s["kind"] == "loop"}

        assert p.pid in loops({})
        assert p.pid in loops({"ours": [[p.pid, start + 1]]})
        assert p.pid in loops({"ours": [[p.pid, "x"], "junk", [True, start]]})
        assert p.pid not in loops({"ours": [[p.pid, start]]})
        own.add("hx", (p.pid, start))
        own.add("hx", ("not", "ids"))
        req = probe_request(HostConfig(name="hx", address="hx"))
        assert req["ours"] == [[p.pid, start]]
        assert p.pid not in loops(req)
    finally:
        p.kill()
        p.wait()


def test_the_local_controller_owns_only_the_children_it_started_as_helpers():
    """On the `local` host the controller is the session: a child of it that carries the session
    arg (a helper it started) is ours, with what that helper starts; another child of the same
    process (a test runner's, a shell's) is not."""
    me = procfs.session_argv()[0]
    anchor = (os.getpid(), procfs.start_ticks(os.getpid()), me)
    code = "import subprocess, sys, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"
    helper = subprocess.Popen([sys.executable, "-c", code, "--resident", me])
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import time

        for _ in range(100):
            kids = procfs.children(helper.pid)
            if kids:
                break
            time.sleep(0.05)
        assert kids, "the helper's child did not start"
        assert procfs.in_session(helper.pid, anchor)
        assert procfs.in_session(kids[0], anchor)  # what a helper starts is ours too
        assert not procfs.in_session(stranger.pid, anchor)
    finally:
        for k in procfs.children(helper.pid):
            os.kill(k, 9)
        for p in (helper, stranger):
            p.kill()
            p.wait()
