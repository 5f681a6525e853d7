"""`fleetdeck watch` as a service: one per state folder, SIGTERM from any state within 2 s with
the outbox saved, each transition delivered once across a stop and a crash, a hostile host's
data and unwritable state files as warnings. Real `watch` processes on a local fleet, real
hooks, a real TCP peer that never answers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleetdeck.backend.host.lib import procfs

from support.watch import WATCH, local_fleet, rising_evals, state_dir

# the hook: with `go` present it records "id<TAB>state<TAB>rule<TAB>subject"; without it, it
# notes its pid and that of a child it backgrounds, and hangs (a delivery in flight)
HOOK = """import os, subprocess, sys, time
log, go, pids = sys.argv[1:4]
if os.path.exists(go):
    open(log, 'a').write('\\t'.join(sys.argv[4:]) + '\\n')
    sys.exit(0)
child = subprocess.Popen(['sleep', '300'])
open(pids, 'w').write(f'{os.getpid()} {child.pid}')
time.sleep(300)
"""


def hook_alerts(tmp_path: Path) -> tuple[str, Path, Path, Path]:
    script, log, go, pids = (
        tmp_path / "hook.py",
        tmp_path / "hook.log",
        tmp_path / "go",
        tmp_path / "hook.pids",
    )
    script.write_text(HOOK)
    argv = [
        sys.executable,
        str(script),
        str(log),
        str(go),
        str(pids),
        "{id}",
        "{state}",
        "{rule}",
        "{subject}",
    ]
    return f"on_alert = {json.dumps(argv)}\n", log, go, pids


class Proc:
    """A `fleetdeck watch` process and the lines it prints."""

    def __init__(self, fleet: Path, *args: str, env: dict | None = None) -> None:
        self.p = subprocess.Popen(
            [*WATCH, "--hosts", str(fleet), "watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.t = threading.Thread(
            target=lambda: self.lines.extend(iter(self.p.stdout.readline, "")), daemon=True
        )
        self.t.start()

    def wait_for(self, what, deadline_s: float = 120):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            v = what()
            if v:
                return v
            if self.p.poll() is not None and not what():
                raise AssertionError(
                    f"watch ended ({self.p.returncode}): {self.p.stderr.read()[-2000:]}"
                )
            time.sleep(0.05)
        raise AssertionError(f"timed out; watch printed {self.lines[-20:]}")

    def started(self) -> None:
        self.wait_for(lambda: any(x.startswith("watching ") for x in self.lines))

    def stop_timed(self, sig: int = signal.SIGTERM) -> tuple[int, float]:
        t0 = time.monotonic()
        self.p.send_signal(sig)
        rc = self.p.wait(60)
        return rc, time.monotonic() - t0

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


#: a stop that hangs waits on a 30 s (or 60 s) timeout; one that works takes well under 2 s on
#: an idle machine (the soak and `docs/development.md` give the figures). The bound is generous so
#: that a loaded machine's scheduling never fails the test, and still far below any hang.
STOP_BOUND = 10.0


def test_a_second_watch_exits_1_naming_the_running_one_and_the_lock_dies_with_its_holder(tmp_path):
    fleet = local_fleet(tmp_path, tmp_path / "runs")
    first = Proc(fleet, "--interval", "1")
    try:
        first.started()
        second = subprocess.run(
            [*WATCH, "--hosts", str(fleet), "watch", "--count", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 1, second.stderr
        assert f"already running for {state_dir()} (pid {first.p.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        first.p.kill()  # a crash: no clean-up ran
        first.p.wait()
        third = subprocess.run(
            [*WATCH, "--hosts", str(fleet), "watch", "--count", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert third.returncode == 0, third.stderr
    finally:
        first.kill()


def test_sigterm_mid_delivery_ends_promptly_and_the_next_start_delivers_each_transition_once(
    tmp_path,
):
    rising_evals(tmp_path / "runs" / "run-1")
    alerts, log, go, pids = hook_alerts(tmp_path)
    fleet = local_fleet(tmp_path, tmp_path / "runs", alerts)
    w = Proc(fleet, "--interval", "0.5")
    try:
        w.started()
        w.wait_for(lambda: pids.exists() and pids.read_text().strip())  # the hook is in flight
        hook_pid, child_pid = map(int, pids.read_text().split())
        time.sleep(1.0)  # polls go on meanwhile
        rc, took = w.stop_timed()
    finally:
        w.kill()
    assert rc == 0 and took < STOP_BOUND, (rc, took)
    assert not procfs.alive(hook_pid) and not procfs.alive(child_pid)  # its group went with it
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    saved = json.loads((state_dir() / "alerts.json").read_text())
    live, _, _ = Journal(state_dir() / "outbox.jsonl").load(saved["outbox_seq"], move=False)
    queued = [(p.id, p.alert.rule) for p in live]
    assert ("overfitting" in {r for _, r in queued}) and not log.exists()
    assert any(a["rule"] == "overfitting" for a in saved["firing"])
    first_lines = [x for x in w.lines if " ALERT " in x]

    go.touch()
    again = Proc(fleet, "--interval", "0.5")
    try:
        again.started()
        again.wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= len(queued))
        time.sleep(2.0)  # more polls: nothing more
        rc, took = again.stop_timed(signal.SIGINT)
    finally:
        again.kill()
    assert rc == 0 and took < STOP_BOUND, (rc, took)
    got = [tuple(x.split("\t")) for x in log.read_text().splitlines()]
    assert sorted(g[0] for g in got) == sorted(i for i, _ in queued)  # each once, by its id
    assert [x for x in again.lines if " ALERT " in x] == []  # judged once, not again
    assert len(first_lines) == len(queued)


def test_sigterm_mid_poll_ends_promptly(tmp_path):
    """A host that accepts the connection and never speaks holds the poll for its connect
    timeout (30 s here); SIGTERM ends watch at once anyway."""
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    host = (
        f'[hosts.mute]\naddress = "127.0.0.1"\nport = {mute.getsockname()[1]}\nconnect_timeout = 30\n'
        f'known_hosts = "{tmp_path / "kh"}"\n'
    )
    fleet = local_fleet(tmp_path, tmp_path / "runs", extra_hosts=host)
    w = Proc(fleet, "--interval", "0.5")
    try:
        w.started()
        time.sleep(2.0)  # inside the first poll, waiting on the mute host
        assert w.p.poll() is None
        rc, took = w.stop_timed()
    finally:
        w.kill()
        mute.close()
    assert rc == 0 and took < STOP_BOUND, (rc, took)


def test_a_hostile_hosts_strings_are_warnings_and_safe_lines_never_a_traceback(tmp_path):
    """A run folder named with undecodable bytes, an escape sequence and a bell, whose eval loss
    rises: watch prints its transition escaped, in a UTF-8 locale whose stdout is strict, and
    the hook receives the subject by the argv rule."""
    runs = tmp_path / "runs"
    runs.mkdir()
    bad = os.fsencode(str(runs)) + b"/run-\xff\x1b[31mred\x07"
    rising_evals(Path(os.fsdecode(bad)))
    alerts, log, go, _ = hook_alerts(tmp_path)
    go.touch()
    fleet = local_fleet(tmp_path, runs, alerts)
    env = {**os.environ, "LC_ALL": "C.UTF-8", "PYTHONUTF8": "0"}
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run(
        [*WATCH, "--hosts", str(fleet), "watch", "--count", "2", "--interval", "0.2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        errors="surrogateescape",
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    shown_subject = f"{runs}/run-\\xff\\x1b[31mred\\x07"
    assert f"ALERT overfitting on local: {shown_subject}" in done.stdout
    got = [x.split("\t") for x in log.read_text().splitlines()]
    assert [g[1:4] for g in got] == [["firing", "overfitting", shown_subject]]


async def test_one_hosts_data_that_breaks_a_rule_is_that_hosts_warning(tmp_path):
    """h2 sends a loss too large for a float: the rule that formats it fails. h1's alert
    still fires, h2's alerts stay as they were, and the warning names h2."""
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
    from fleetdeck.backend.monitor.service import Monitor

    def snap(t: float) -> FleetSnapshot:
        stalled = Run(host="h1", path="/runs/a", name="a", state="stalled", reason="no progress")
        spike = Run(
            host="h2",
            path="/runs/b",
            name="b",
            state="running",
            losses=tuple((i, 1.0) for i in range(1, 8)) + ((8, 10**400),),
        )
        return FleetSnapshot(
            hosts=(
                HostSnapshot("h1", True, time=t, runs=(stalled,)),
                HostSnapshot("h2", True, time=t, runs=(spike,)),
            ),
            time=t,
        )

    class Source:
        async def poll(self) -> FleetSnapshot:
            return snap(time.time())

    fleet = parse_fleet('[hosts.h1]\naddress = "a"\n[hosts.h2]\naddress = "b"\n', "hosts.toml")
    said: list[tuple[str, str]] = []
    m = Monitor(fleet, source=Source(), report=lambda k, line: said.append((k, line)))
    await m.run(count=2, interval=0.01)
    assert [(a.rule, a.host) for a in m.firing()] == [("run-stalled", "h1")]
    warnings = [line for k, line in said if k == "warning"]
    assert len(warnings) == 1 and warnings[0].startswith(
        "h2: what the host sent could not be judged"
    )


async def test_unwritable_alert_state_and_seat_checks_are_warnings(tmp_path):
    """alerts.json and seat_checks.json are folders (so neither can be replaced): watch goes on,
    says so once, and the seat check still raises its alert."""
    pytest.importorskip("transformers")
    import io

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.cli.watch import Watcher

    from support.sshfleet import free_port

    server = Path(__file__).parents[1] / "support" / "seat_server.py"
    wrapper = tmp_path / "vllm"
    wrapper.write_text(
        f"#!{sys.executable}\nimport runpy, sys\n"
        f"sys.argv = [{str(server)!r}, '--port', sys.argv[sys.argv.index('--port') + 1], '--nan']\n"
        f"runpy.run_path({str(server)!r}, run_name='__main__')\n"
    )
    wrapper.chmod(0o755)
    port = free_port()
    seat = subprocess.Popen(
        [str(wrapper), "serve", "random:tiny", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert seat.stdout.readline().startswith("listening on")
        (state_dir() / "seat_checks.json").mkdir(parents=True)
        (state_dir() / "alerts.json").mkdir()
        fleet = parse_fleet(
            f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{tmp_path}"]\n'
            "[alerts]\nseat_check_interval = 1\n",
            "hosts.toml",
        )
        out = io.StringIO()
        w = Watcher(fleet, out=out)
        await w.run(count=2, interval=0.1)
    finally:
        seat.kill()
        seat.wait()
    text = out.getvalue()
    assert f"ALERT seat-check on local: port {port}" in text
    assert text.count(f"warning: seat check local:{port} not saved") == 1
    assert text.count("warning: alert state not saved") == 1


async def test_the_dashboard_beside_a_running_watch_delivers_nothing_and_names_the_deliverer(
    tmp_path,
):
    import asyncio

    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.tui.app import FleetdeckApp

    rising_evals(tmp_path / "runs" / "run-1")
    alerts, log, go, _ = hook_alerts(tmp_path)
    go.touch()
    fleet = local_fleet(tmp_path, tmp_path / "runs", alerts)
    w = Proc(fleet, "--interval", "0.5")
    try:
        w.started()
        await asyncio.to_thread(w.wait_for, lambda: log.exists() and log.read_text())
        app = FleetdeckApp(load_fleet(str(fleet)), poll_interval=0.5)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(600):
                if app.state.polls >= 3:
                    break
                await pilot.pause(0.1)
            assert [a.rule for a in app.alert_watch.firing] == ["overfitting"]  # the same verdict
            await pilot.press("5")
            await pilot.pause(0.2)
            detail = str(app.screen.query_one("#alerts-detail").render())
            assert f"Hooks: delivered by fleetdeck watch (pid {w.p.pid}," in detail
        rc, _ = w.stop_timed()
    finally:
        w.kill()
    assert rc == 0
    assert [x.split("\t")[1:3] for x in log.read_text().splitlines()] == [["firing", "overfitting"]]


def test_sigterm_mid_seat_check_ends_promptly(tmp_path):
    """A seat (`vllm serve` to /proc) that accepts the check's connection and never answers:
    the check would wait its 20 s; SIGTERM ends watch at once anyway."""
    from support.sshfleet import free_port

    accepted = tmp_path / "accepted"
    wrapper = tmp_path / "vllm"
    wrapper.write_text(
        f"#!{sys.executable}\nimport socket, sys\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "s = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', port))\ns.listen(8)\nprint('listening', flush=True)\nheld = []\n"
        "while True:\n    c, _ = s.accept()\n    held.append(c)\n"
        f"    open({str(accepted)!r}, 'a').write('x')\n"
    )
    wrapper.chmod(0o755)
    port = free_port()
    seat = subprocess.Popen(
        [str(wrapper), "serve", "random:tiny", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert seat.stdout.readline().startswith("listening")
        fleet = local_fleet(tmp_path, tmp_path / "runs", "seat_check_interval = 1\n")
        w = Proc(fleet, "--interval", "0.5")
        try:
            w.started()
            w.wait_for(lambda: accepted.exists())  # the check is waiting on the seat
            time.sleep(0.5)
            rc, took = w.stop_timed()
        finally:
            w.kill()
    finally:
        seat.kill()
        seat.wait()
    assert rc == 0 and took < STOP_BOUND, (rc, took)


def test_sigterm_beside_a_silent_host_a_mute_one_and_cpu_hogs_stops_cleanly(spare_fleet, tmp_path):
    """watch polling a host that answered and then went silent with its connection open (its
    sshd and all below it SIGSTOPped), a listener that accepts and never speaks, and the local
    host, the machine loaded: SIGTERM ends it cleanly within 10 s (it takes well under 2 s),
    its own stop finishing rather than the watchdog that ends a stop that did not finish."""
    import urllib.request

    from fleetdeck.cli.watch import FORCED_STOP

    from support.busy import hogs

    spare_fleet.add("quiet")
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))  # refused until it listens: the first cycle is not held by it
    extra = (
        f'[hosts.mute]\naddress = "127.0.0.1"\nport = {mute.getsockname()[1]}\nconnect_timeout = 60\n'
        f'known_hosts = "{tmp_path / "kh"}"\n'
    )
    fleet = local_fleet(tmp_path, tmp_path / "runs", extra_hosts=extra)
    # the loopback fleet's [defaults] (its keys, known_hosts) and "quiet", ahead of local and mute
    fleet.write_text(
        spare_fleet.fleet_toml(defaults={"command_timeout": 60}) + "\n" + fleet.read_text()
    )
    w = Proc(fleet, "--interval", "0.5", "--prometheus", "127.0.0.1:0")
    try:
        url = w.wait_for(
            lambda: next((x.split()[-1] for x in w.lines if x.startswith("metrics on ")), None)
        )

        def quiet_up() -> bool:
            try:
                body = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                return False
            return 'fleetdeck_host_up{host="quiet"} 1.0' in body

        w.wait_for(quiet_up)
        mute.listen(8)  # its next attempt (backoff: 1, 2, 4 s) waits on silence
        spare_fleet.pause("quiet")
        with hogs():
            time.sleep(4.0)  # cycles go on: "quiet" is asked and never answers
            assert w.p.poll() is None
            rc, took = w.stop_timed()
    finally:
        w.kill()
        spare_fleet.resume("quiet")
        mute.close()
    err = w.p.stderr.read()
    print(f"watch stop (SIGTERM) with a silent host, a mute one and CPU hogs: {took:.2f}s")
    assert rc == 0 and took < 10, (rc, took, err[-2000:])
    assert FORCED_STOP.split("{")[0] not in err, (
        f"the stop did not finish by itself ({took:.2f}s): {err[-2000:]}"
    )
    assert "Traceback" not in err, err[-2000:]
