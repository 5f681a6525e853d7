"""`fleetdeck wait HOST RUN`: exit 0 finished with a whole final adapter, 1 failed (the reason on
stderr), 3 timed out, 2 no such run; a host that stops answering is waited through. Real
hand-started trainers on a real loopback sshd host; the CLI run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fleetdeck.backend.fleet.models import HostSnapshot, Run
from fleetdeck.backend.fleet.run_wait import RunNotFound, resolve_run, split_target

from support.hf_trainer import start_trainer

pytestmark = pytest.mark.sshd


def _wait(fleet, *args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet), "wait", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def host(spare_fleet, tmp_path):
    h = spare_fleet.add("wt")
    return spare_fleet, spare_fleet.write_fleet(tmp_path / "hosts.toml"), h


def test_exit_0_when_it_finishes_with_its_adapter_and_1_when_it_dies(host):
    _, fleet, h = host
    ok = start_trainer(h.runs / "run-1", 30, 0.05)
    bad = start_trainer(h.runs / "run-2", 400, 0.05, die_at=20)
    try:
        out = _wait(fleet, "wt", "run-1", "--interval", "0.5", "--json")
        assert out.returncode == 0, out.stderr
        assert out.stderr == ""
        doc = json.loads(out.stdout)
        assert doc["result"] == "finished" and doc["adapter"] == str(h.runs / "run-1" / "adapter")
        out = _wait(fleet, f"wt:{h.runs / 'run-2'}", "--interval", "0.5")
        assert out.returncode == 1, (out.stdout, out.stderr)
        assert "failed" in out.stderr and "CUDA out of memory" in out.stderr, out.stderr
    finally:
        for p in (ok, bad):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_exit_3_on_timeout_and_2_for_no_such_run(host):
    _, fleet, h = host
    slow = start_trainer(h.runs / "run-3", 10_000, 0.2)
    try:
        t0 = time.monotonic()
        out = _wait(fleet, "wt", "run-3", "--timeout", "3s", "--interval", "0.5")
        assert out.returncode == 3, (out.stdout, out.stderr)
        assert "still running" in out.stderr and time.monotonic() - t0 < 60
        out = _wait(fleet, "wt", "run-nope", "--timeout", "5s")
        assert out.returncode == 2 and "no run named run-nope on wt" in out.stderr, out.stderr
        out = _wait(fleet, "wt")
        assert out.returncode == 2 and "HOST RUN or HOST:PATH" in out.stderr
    finally:
        slow.kill()
        slow.wait()


def test_a_host_that_stops_answering_is_waited_through_not_read_as_failed(host):
    sf, fleet, h = host
    p = start_trainer(h.runs / "run-4", 80, 0.1)
    try:
        w = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetdeck.cli.main",
                "--hosts",
                str(fleet),
                "wait",
                "wt",
                "run-4",
                "--interval",
                "0.5",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.0)
        sf.kill("wt")  # sshd and its sessions go away while the run goes on
        time.sleep(3.0)
        sf.start("wt")
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, (out, err)
        doc = json.loads(out)
        assert doc["result"] == "finished" and any("does not answer" in n for n in doc["notes"])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _snap(*paths):
    runs = tuple(Run(host="h", path=p, name=os.path.basename(p), state="running") for p in paths)
    return HostSnapshot(name="h", reachable=True, time=0.0, runs=runs)


def test_one_resolver_names_runs_and_refuses_an_ambiguous_name():
    s = _snap("/a/runs/run-8", "/b/runs/run-8", "/a/runs/sweep/run-9", "/a/runs/run-10")
    assert resolve_run(s, "/a/runs/run-8").path == "/a/runs/run-8"
    assert resolve_run(s, "run-10/").path == "/a/runs/run-10"
    assert resolve_run(s, "sweep/run-9").path == "/a/runs/sweep/run-9"
    with pytest.raises(RunNotFound) as e:
        resolve_run(s, "run-8")
    assert e.value.code == "ambiguous-run" and "/a/runs/run-8" in e.value.message
    assert "/b/runs/run-8" in e.value.message
    with pytest.raises(RunNotFound) as e:
        resolve_run(s, "run-\x1b[2J", ("/a/runs",))
    assert e.value.code == "no-run" and "\x1b" not in e.value.message
    assert split_target("h:/x/run-1", None) == ("h", "/x/run-1")
    assert split_target("h", "run-1") == ("h", "run-1")
