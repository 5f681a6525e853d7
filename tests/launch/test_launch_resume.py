"""`launch --resume`: a failed or stopped run continues from its newest checkpoint; anything
else is refused with the reason (real sshd host, real trainer for the end-to-end case)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from fleetdeck.backend.actions.launch.main import preflight
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import layout, procfs
from fleetdeck.cli.main import main

from support.launch import base_values, manifest, wait_for, write_corpus, write_run_toml
from support.weights import safetensors

pytestmark = pytest.mark.sshd


@pytest.fixture
def h1(sshd_fleet, tmp_path):
    fleet = sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])
    return (
        fleet,
        load_fleet(str(fleet)).host("h1"),
        sshd_fleet.hosts["h1"].runs,
        write_corpus(tmp_path / "c.jsonl"),
    )


def stopped_run(run, values, state="failed", checkpoint=4, **manifest):
    """A run folder as the trainer leaves it when it was stopped after `checkpoint` steps."""
    run.mkdir()
    if checkpoint is not None:
        ck = run / "checkpoints" / f"checkpoint-{checkpoint}"
        ck.mkdir(parents=True)
        (ck / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(64)))
        (ck / "adapter_config.json").write_text("{}")
        (ck / "trainer_state.json").write_text(json.dumps({"global_step": checkpoint}))
    m = {"state": state, "config": dict(values), "error": "stopped by SIGTERM"}
    m.update(manifest)
    (run / "run.json").write_text(json.dumps(m))
    return run


async def resume_check(host, values):
    async with HostLink(host) as link:
        pre = await preflight(link, values, resume=True)
    return next(c for c in pre.checks if c.name == "resume")


async def test_a_failed_run_with_a_checkpoint_may_resume(h1):
    _, host, runs, corpus = h1
    values = base_values(runs, corpus, "failed-ok")
    stopped_run(runs / "failed-ok", values)
    c = await resume_check(host, values)
    assert c.ok, c.message
    assert c.message == (
        f"resumes run {runs / 'failed-ok'} (failed: stopped by SIGTERM) from checkpoint-4 (step 4)"
    )


async def test_resume_skips_a_checkpoint_whose_save_was_killed(h1):
    """checkpoint-8 holds only trainer_state.json (killed mid-save): the run resumes from
    checkpoint-4, the newest complete one; with no complete one it is refused."""
    _, host, runs, corpus = h1
    values = base_values(runs, corpus, "crashed-save")
    run = stopped_run(runs / "crashed-save", values)
    (run / "checkpoints" / "checkpoint-8").mkdir()
    (run / "checkpoints" / "checkpoint-8" / "trainer_state.json").write_text('{"global_step": 8}')
    c = await resume_check(host, values)
    assert c.ok and "from checkpoint-4 (step 4)" in c.message, c.message
    (run / "checkpoints" / "checkpoint-4" / "adapter_model.safetensors").write_bytes(b"")
    c = await resume_check(host, values)
    assert not c.ok and "has no complete checkpoint" in c.message, c.message


@pytest.mark.parametrize(
    "case", ["missing", "finished", "no-checkpoint", "live", "other-config", "final-adapter"]
)
async def test_what_cannot_resume_is_refused_with_the_reason(h1, case):
    _, host, runs, corpus = h1
    name = f"refuse-{case}"
    values = base_values(runs, corpus, name)
    run = runs / name
    live = None
    if case == "finished":
        stopped_run(run, values, state="finished")
    elif case == "no-checkpoint":
        stopped_run(run, values, checkpoint=None)
    elif case == "live":
        live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        stopped_run(
            run, values, state="running", pid=live.pid, start_ticks=procfs.start_ticks(live.pid)
        )
    elif case == "other-config":
        stopped_run(run, dict(values, seq_len=64, lr=0.5))
    elif case == "final-adapter":
        stopped_run(run, values)
        (run / "adapter").mkdir()
        (run / "adapter" / "adapter_model.safetensors").write_bytes(safetensors(b"\0" * 8))
        (run / "adapter" / "adapter_config.json").write_text("{}")
    try:
        c = await resume_check(host, values)
    finally:
        if live is not None:
            live.kill()
            live.wait()
    assert not c.ok
    expect = {
        "missing": f"run {run} does not exist on this host; there is nothing to resume",
        "finished": f"run {run} already finished with its final adapter; there is nothing to resume",
        "final-adapter": f"run {run} already finished with its final adapter; there is nothing to resume",
        "no-checkpoint": f"run {run} has no complete checkpoint",
        "live": f"run {run} is running (pid {live.pid if live else 0}); it cannot be resumed while it runs",
        "other-config": "RUN.toml differs from the run's own config in lr, seq_len; resume with the run's own",
    }[case]
    assert c.message.startswith(expect), c.message


async def test_a_recorded_pid_without_start_time_does_not_block_a_resume(h1):
    """A bare pid is no identity: a run.json saying running with only a pid (which now names
    this very test process) is a stopped run, not a live one."""
    _, host, runs, corpus = h1
    values = base_values(runs, corpus, "bare-pid")
    stopped_run(runs / "bare-pid", values, state="running", pid=os.getpid())
    assert (await resume_check(host, values)).ok


@pytest.mark.train
def test_a_stopped_real_run_resumes_from_its_newest_checkpoint_and_finishes(h1, tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    fleet, _, runs, corpus = h1
    run = runs / "stopped-then-resumed"
    toml = write_run_toml(
        tmp_path / "RUN.toml",
        **base_values(runs, corpus, run.name, max_steps=200, save_steps=5, eval_steps=100),
    )
    assert main(["--hosts", str(fleet), "launch", "h1", str(toml)]) == 0, capsys.readouterr().err
    pid = None
    try:
        pid = wait_for(
            lambda: manifest(run).get("state") == "running" and manifest(run).get("pid"),
            "the trainer",
            limit=300.0,
        )
        first = wait_for(
            lambda: (
                (run / "checkpoints" / "checkpoint-5" / "trainer_state.json").is_file()
                or manifest(run).get("state") == "finished"
            ),
            "the first checkpoint",
            limit=300.0,
            step=0.02,
        )
        if manifest(run).get("state") == "finished":
            pytest.skip("the run finished before it could be stopped")
        os.kill(pid, signal.SIGSTOP)  # hold it still while the stop is arranged
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)
        assert first
        stopped = wait_for(
            lambda: manifest(run).get("state") in ("failed", "finished") and manifest(run),
            "the stopped run to record its end",
            limit=300.0,
        )
    finally:
        if pid and procfs.alive(pid):
            os.kill(pid, signal.SIGKILL)
    if stopped["state"] == "finished":
        pytest.skip("the run finished before the stop reached it")
    newest = max(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir())
    capsys.readouterr()
    # without --resume the folder is someone's run: refused
    assert main(["--hosts", str(fleet), "launch", "h1", str(toml)]) == 1
    assert "already holds a run" in capsys.readouterr().err
    assert main(["--hosts", str(fleet), "launch", "h1", str(toml), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "resumed" in out and f"from checkpoint-{newest} (step {newest})" in out
    final = wait_for(
        lambda: manifest(run).get("state") in ("finished", "failed") and manifest(run),
        "the end",
        limit=300.0,
    )
    log = (run / "train.log").read_text()
    assert final["state"] == "finished", log[-2000:]
    assert f"resuming from checkpoint-{newest}" in log
    assert layout.final_adapter(str(run)) == str(run / "adapter")
    states = [s["state"] for s in final["states"]]
    assert (
        "failed" in states and states[-1] == "finished" and states.index("failed") < len(states) - 1
    )
