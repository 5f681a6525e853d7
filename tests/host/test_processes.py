"""The processes that matter on a host, and stopping one: listed by the probe (a real loop on a
real sshd host), stopped only as the listed process (pid, start time, command) once its pid and
program are typed back, audited."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.processes import confirmation, stop_process
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.models import Process
from fleetdeck.backend.fleet.poller import Poller

pytestmark = pytest.mark.sshd


@pytest.fixture
def looping():
    """A real shell loop on this machine (every loopback host sees it)."""
    p = subprocess.Popen(["bash", "-c", "while true; do sleep 0.2; done"], start_new_session=True)
    time.sleep(0.5)
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


async def _listed(poller, host: str, pid: int) -> Process | None:
    for _ in range(3):
        snap = (await poller.poll()).hosts[0]
        assert snap.reachable, snap.error
        hit = next((p for p in snap.processes if p.pid == pid), None)
        if hit is not None:
            return hit
    return None


async def test_a_loop_is_listed_and_stopped_only_once_typed_back_and_audited(
    spare_fleet, tmp_path, looping
):
    spare_fleet.add("pr")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    async with Poller(fleet) as poller:
        proc = await _listed(poller, "pr", looping.pid)
        assert proc is not None, "the loop is among the processes that matter"
        assert "loop" in proc.why and proc.command.startswith("bash -c while true")
        assert proc.rss_bytes and proc.start > 0
        link = poller.link("pr")
        # a vague yes stops nothing
        rep = await stop_process(link, proc, "yes")
        assert not rep.ok and rep.reason_code == "not-confirmed" and looping.poll() is None
        # a process that is not the listed one any more (another start time): refused, no signal
        ghost = Process(pid=proc.pid, start=proc.start + 1, user=proc.user, command=proc.command)
        rep = await stop_process(link, ghost, confirmation(ghost))
        assert not rep.ok and rep.reason_code == "gone" and looping.poll() is None
        # the command changed under the same pid and start: refused
        other = Process(
            pid=proc.pid, start=proc.start, user=proc.user, command="python3 something-else"
        )
        rep = await stop_process(link, other, confirmation(other))
        assert not rep.ok and rep.reason_code == "changed" and looping.poll() is None
        # typed back exactly: SIGTERM, and it is gone
        assert confirmation(proc) == f"{looping.pid} bash"
        rep = await stop_process(link, proc, f"{looping.pid} bash")
        assert rep.ok and rep.result == "stopped", rep
        assert looping.wait(10) is not None
    records = [json.loads(line) for line in audit.audit_path().read_text().splitlines()]
    stops = [r for r in records if r["action"] == "process-stop"]
    assert [r["result"] for r in stops] == ["refused", "refused", "refused", "done"]
    assert [r["reason"] for r in stops] == ["not-confirmed", "gone", "changed", None]
    assert stops[-1]["pid"] == looping.pid and stops[-1]["host"] == "pr"


def test_pid_1_and_a_bad_request_are_refused_by_the_helper():
    from fleetdeck.backend.host import process as process_remote
    from fleetdeck.backend.host.lib.serve import dispatch

    ans = dispatch({"stop": process_remote.stop}, {"op": "stop", "pid": 1, "start": 1})
    assert ans["ok"] is False and ans["error"]["code"] == "init"
    ans = dispatch({"stop": process_remote.stop}, {"op": "stop", "pid": "1; rm -rf /", "start": 1})
    assert ans["ok"] is False and ans["error"]["code"] == "bad-request"


def _start(pid: int) -> int:
    from pathlib import Path

    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


def test_the_helper_names_its_witness_the_pid_with_its_start_time_gone(looping):
    from fleetdeck.backend.host import process as process_remote
    from fleetdeck.backend.host.lib.serve import dispatch

    start = _start(looping.pid)
    ans = dispatch(
        {"stop": process_remote.stop},
        {
            "op": "stop",
            "pid": looping.pid,
            "start": start,
            "command": "bash -c while true",
            "grace": 5,
        },
    )
    assert ans["ok"] and ans["result"] == "stopped", ans
    assert ans["witness"] == {
        "pid": looping.pid,
        "start": start,
        "gone": True,
        "checked": f"/proc/{looping.pid}/stat",
    }
    assert looping.wait(10) is not None


@pytest.mark.parametrize(
    "witness",
    [None, {}, "gone", {"pid": 0, "start": 0, "gone": True}, "other-start", "paused-but-running"],
)
async def test_stopped_without_its_witness_is_not_taken_as_stopped(
    spare_fleet, tmp_path, looping, monkeypatch, witness
):
    """A host whose helper says "stopped" but names no witness, or another process's (a
    stand-in helper on a real sshd host): refused as `no-witness`, never reported stopped; a
    witness that is not even an object (`"gone"`) is not the declared answer (`bad-answer`)."""
    from fleetdeck.backend.actions import processes
    from fleetdeck.backend.fleet.link.ssh import HostLink

    spare_fleet.add("pw")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    proc = Process(
        pid=looping.pid,
        start=_start(looping.pid),
        user="root",
        command="bash -c while true; do sleep 0.2; done",
    )
    result, signal, gone = "stopped", "TERM", "gone"
    if witness == "other-start":
        witness = {"pid": proc.pid, "start": proc.start + 1, "gone": True}
    elif witness == "paused-but-running":  # "paused", with /proc saying it runs (state S)
        result, signal, gone = "paused", "STOP", "there, in its new state"
        witness = {"pid": proc.pid, "start": proc.start, "gone": False, "state": "S"}
    ans = {
        "ok": True,
        "result": result,
        "signals": [f"SIG{signal}"],
        **({} if witness is None else {"witness": witness}),
    }
    monkeypatch.setattr(
        processes, "HELPER", f"import json, sys\nsys.stdin.read()\nprint(json.dumps({ans!r}))\n"
    )
    async with HostLink(fleet.host("pw")) as link:
        rep = await stop_process(link, proc, confirmation(proc), signal=signal)
    reason = "bad-answer" if witness == "gone" else "no-witness"
    assert not rep.ok and rep.reason_code == reason and rep.result == "failed", rep
    if reason == "bad-answer":
        assert rep.message.endswith("witness is a string, not an object"), rep.message
    else:
        assert f"named no witness (pid {proc.pid} with start time {proc.start} {gone})" in (
            rep.message
        )
    assert looping.poll() is None
    (rec,) = [r for r in audit.read_audit() if r["action"] == "process-stop"]
    assert rec["result"] == "failed" and rec["reason"] == reason


SAVER = """
import signal, sys, time
def save(*_):
    open(sys.argv[1], "w").write("saved")
    sys.exit(0)
signal.signal(signal.SIGINT, save)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
open(sys.argv[1] + ".ready", "w").write("1")
while True:
    time.sleep(0.1)
"""


def _state(pid: int) -> str:
    from pathlib import Path

    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()


async def test_the_chosen_signal_is_sent_checked_witnessed_and_audited_by_name(
    spare_fleet, tmp_path, looping
):
    """STOP pauses a real loop (state T read back by the host), CONT resumes it, HUP reaches a
    process that ignores it (still running), INT makes a trainer-like process save and end;
    each audited with its signal's name."""
    import sys

    spare_fleet.add("ps")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    marker = tmp_path / "saved"
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(marker)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "saved.ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        loop = Process(
            pid=looping.pid,
            start=_start(looping.pid),
            user="root",
            command="bash -c while true; do sleep 0.2; done",
        )
        trainer = Process(
            pid=saver.pid,
            start=_start(saver.pid),
            user="root",
            command=" ".join([sys.executable, "-c", SAVER, str(marker)]),
        )
        async with Poller(fleet) as poller:
            link = poller.link("ps")
            rep = await stop_process(link, loop, confirmation(loop), signal="USR1")
            assert not rep.ok and rep.reason_code == "bad-signal"
            rep = await stop_process(link, loop, confirmation(loop), signal="STOP")
            assert rep.ok and rep.result == "paused", rep
            assert _state(looping.pid) == "T" and "state T" in rep.message
            rep = await stop_process(link, loop, confirmation(loop), signal="CONT")
            assert rep.ok and rep.result == "resumed", rep
            assert _state(looping.pid) != "T" and looping.poll() is None
            rep = await stop_process(link, trainer, confirmation(trainer), signal="HUP")
            assert rep.ok and rep.result == "signalled" and saver.poll() is None, rep
            assert rep.message.startswith(
                f"SIGHUP delivered to process {saver.pid}; it is still running"
            )
            rep = await stop_process(link, trainer, confirmation(trainer), signal="INT")
            assert rep.ok and rep.result == "stopped", rep
            assert saver.wait(10) == 0 and marker.read_text() == "saved"
    finally:
        if saver.poll() is None:
            saver.kill()
        saver.wait()
    stops = [r for r in audit.read_audit() if r["action"] == "process-stop"]
    assert [(r["signal"], r["result"]) for r in stops] == [
        ("USR1", "refused"),
        ("STOP", "done"),
        ("CONT", "done"),
        ("HUP", "done"),
        ("INT", "done"),
    ]


def test_the_helper_refuses_a_signal_it_does_not_offer_before_sending_anything(looping):
    from fleetdeck.backend.host import process as process_remote
    from fleetdeck.backend.host.lib.serve import dispatch

    ans = dispatch(
        {"stop": process_remote.stop},
        {
            "op": "stop",
            "pid": looping.pid,
            "start": _start(looping.pid),
            "command": "bash -c while true",
            "signal": "SEGV",
        },
    )
    assert ans["ok"] is False and ans["error"]["code"] == "bad-signal"
    assert looping.poll() is None and _state(looping.pid) != "T"
