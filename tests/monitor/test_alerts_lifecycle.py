"""Run lifecycle: `run-finished` when a run seen live shows finished with a complete final adapter
(the layout's rule), `run-failed` with the reason the runs listing shows, through the same hook
as every alert; the first look at a run that already ended pages nothing. Real runs on a real
sshd host (a live trainer process named in run.json), a real hook process; and the line
docs/schedules.md gives for "tell me when it is ready" is a fleet file that parses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.backend.monitor.rules.alerts import AlertConfig, AlertEngine

from support.weights import safetensors

T0 = 1_800_000_000.0
HOOK = (
    "import json, sys\ndoc = json.loads(sys.stdin.read())\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    for a in doc.get('alerts') or [doc]:\n"
    "        f.write(json.dumps(a) + '\\n')\n"
)


def snap(t: float, *runs: Run) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=t, runs=runs),), time=t
    )


RUNNING = Run(
    host="h1",
    path="/runs/run-7",
    name="run-7",
    state="running",
    step=90,
    max_steps=100,
    eval_losses=((50, 2.1), (90, 1.9)),
)


def test_a_run_seen_live_that_finishes_with_its_adapter_fires_run_finished_once():
    e = AlertEngine()
    assert e.evaluate(snap(T0, RUNNING)) == []
    # the last step, no complete adapter yet: it waits
    assert e.evaluate(snap(T0 + 5, replace(RUNNING, state="finished", step=100))) == []
    done = replace(RUNNING, state="finished", step=100, adapter="/runs/run-7/adapter")
    (a,) = e.evaluate(snap(T0 + 10, done))
    assert (a.rule, a.subject, a.state, a.severity) == (
        "run-finished",
        "/runs/run-7",
        "firing",
        "info",
    )
    assert a.text == (
        "run run-7 on h1 finished at step 100 of 100: its final adapter is ready at "
        "/runs/run-7/adapter; best eval loss 1.9 at step 90"
    )
    assert e.evaluate(snap(T0 + 15, done)) == []  # once
    (r,) = e.evaluate(snap(T0 + 10 + 15 * 60, done))  # an event: it resolves after the hold
    assert (r.rule, r.state) == ("run-finished", "resolved")
    assert e.evaluate(snap(T0 + 20 * 60, done)) == []


def test_a_run_seen_live_that_fails_fires_run_failed_with_the_listings_reason():
    e = AlertEngine(AlertConfig(event_hold_minutes=5))
    e.evaluate(snap(T0, replace(RUNNING, state="stalled")))
    reason = "run.json says running but pid 4242 is gone (or now another process)"
    (a,) = [
        x
        for x in e.evaluate(snap(T0 + 5, replace(RUNNING, state="failed", reason=reason)))
        if x.rule == "run-failed"
    ]
    assert (
        a.severity == "critical" and a.text == f"run run-7 on h1 failed at step 90 of 100: {reason}"
    )


def test_the_first_look_at_runs_that_already_ended_pages_nothing_and_a_restart_misses_no_end():
    e = AlertEngine()
    ended = (
        replace(RUNNING, path="/runs/a", state="finished", adapter="/runs/a/adapter"),
        replace(RUNNING, path="/runs/b", state="failed", reason="CUDA out of memory"),
    )
    assert e.evaluate(snap(T0, *ended)) == []
    # a folder that appears already finished (a mirrored adapter) is a first look too
    assert (
        e.evaluate(
            snap(
                T0 + 5,
                *ended,
                replace(RUNNING, path="/runs/c", state="finished", adapter="/runs/c/adapter"),
            )
        )
        == []
    )
    # seen running, then the watcher restarts between two polls: the end still pages, once
    e.evaluate(snap(T0 + 10, *ended, RUNNING))
    again = AlertEngine()
    assert again.load_state(json.loads(json.dumps(e.to_state()))) == []
    out = again.evaluate(snap(T0 + 15, *ended, replace(RUNNING, state="failed", reason="killed")))
    assert [(a.rule, a.subject) for a in out] == [("run-failed", "/runs/run-7")]


def test_the_lifecycle_rules_take_severity_for_and_disabled():
    f = parse_fleet(
        '[hosts.h1]\naddress = "x"\n[alerts]\ndisabled = ["run-finished"]\n'
        '[alerts.severity]\nrun-failed = "warning"\n',
        "f.toml",
    )
    e = AlertEngine(f.alerts)
    e.evaluate(snap(T0, RUNNING, replace(RUNNING, path="/runs/x")))
    out = e.evaluate(
        snap(
            T0 + 5,
            replace(RUNNING, state="finished", adapter="/runs/run-7/adapter"),
            replace(RUNNING, path="/runs/x", state="failed", reason="boom"),
        )
    )
    assert [(a.rule, a.severity) for a in out] == [("run-failed", "warning")]


def test_tell_me_when_it_is_ready_is_the_fleet_file_line_docs_schedules_shows():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "schedules.md").read_text()
    i = doc.index("## Told when a run is ready")
    block = re.search(r"```toml\n(.*?)```", doc[i:], re.S).group(1)
    fleet = parse_fleet('[hosts.gx10]\naddress = "x"\n' + block, "docs/schedules.md")
    assert fleet.alerts.on_alert and "{title}" in " ".join(fleet.alerts.on_alert)
    assert "run-finished" in doc[i : i + 2000] and "stray" in doc[:i]


# -- on a real host ----------------------------------------------------------------------------------
def trainer(run: Path) -> subprocess.Popen:
    """A process working in `run` that run.json names (pid and start time): the run is running."""
    from fleetdeck.backend.host.lib import procfs

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], cwd=run)
    time.sleep(0.2)
    (run / "run.json").write_text(
        json.dumps({"state": "running", "pid": p.pid, "start_ticks": procfs.start_ticks(p.pid)})
    )
    (run / "progress.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "step": s,
                    "max_steps": 40,
                    "loss": 2.0 - s / 100,
                    "seconds_per_step": 30.0,
                    "time": time.time(),
                }
            )
            + "\n"
            for s in (10, 20, 30)
        )
    )
    return p


def adapter(run: Path) -> None:
    (run / "adapter").mkdir()
    (run / "adapter" / "adapter_model.safetensors").write_bytes(safetensors(b"\0" * 64))
    (run / "adapter" / "adapter_config.json").write_text("{}")


@pytest.mark.sshd
async def test_run_finished_and_run_failed_reach_a_real_hook_from_a_real_host(sshd_fleet, tmp_path):
    from fleetdeck.backend.monitor.service import Monitor

    h1 = sshd_fleet.hosts["h1"]
    runs = {n: h1.runs / f"lifecycle-{n}-{tmp_path.name}" for n in ("old", "ok", "bad")}
    for r in runs.values():
        r.mkdir()
    adapter(runs["old"])  # already finished before the first look
    (runs["old"] / "run.json").write_text(json.dumps({"state": "finished"}))
    procs = [trainer(runs["ok"]), trainer(runs["bad"])]
    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    fleet = parse_fleet(
        sshd_fleet.fleet_toml(["h1"]) + "\n[alerts]\n"
        'disabled = ["new-stray", "disk-full-eta", "idle-holder", "gpu-headroom"]\n'
        f"on_alert = {json.dumps([sys.executable, str(tmp_path / 'hook.py'), str(log)])}\n",
        "hosts.toml",
    )
    m = Monitor(fleet, role="deliver")
    try:
        await m.cycle()
        mine = {str(r) for r in runs.values()}
        seen = {
            r.path: r.state for h in (await m.poller.poll()).hosts for r in h.runs if r.path in mine
        }
        assert seen == {
            str(runs["old"]): "finished",
            str(runs["ok"]): "running",
            str(runs["bad"]): "running",
        }, seen
        await m.deliverer.drain()
        assert not log.exists()  # the first look pages nothing
        adapter(runs["ok"])
        (runs["ok"] / "run.json").write_text(json.dumps({"state": "finished"}))
        for p in procs:
            p.kill()
            p.wait()
        await m.cycle()
        await m.deliverer.drain()
    finally:
        for p in procs:
            p.kill()
        await m.close()
    got = [json.loads(x) for x in log.read_text().splitlines()]
    assert sorted((a["rule"], a["subject"], a["severity"]) for a in got) == [
        ("run-failed", str(runs["bad"]), "critical"),
        ("run-finished", str(runs["ok"]), "info"),
    ]
    fin = next(a for a in got if a["rule"] == "run-finished")
    assert fin["text"].endswith(f"its final adapter is ready at {runs['ok'] / 'adapter'}")
    bad = next(a for a in got if a["rule"] == "run-failed")
    assert (
        f"failed at step 30 of 40: run.json says running but pid {procs[1].pid} is gone"
        in bad["text"]
    )
