"""A Hugging Face run started by hand (`nohup python train.py > train.log`, the operator's layout:
`<root>/run-<N>/checkpoints/checkpoint-<step>/`) is followed from what its trainer says between
saves, and is `failed`, `stalled`, `running` and `finished` as truly as one fleetdeck launched.

The trainer here is a real process writing what a Trainer writes: tqdm's counter with `\\r`, the
log dicts, a checkpoint every SAVE steps, a Traceback when it dies of an error. The probe is the
real resident one, over a real loopback sshd host.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.poller import Poller

from support.hf_trainer import SAVE, start_trainer

pytestmark = pytest.mark.sshd


async def _run(poller, path: Path):
    snap = (await poller.poll()).hosts[0]
    assert snap.reachable, snap.error
    found = [r for r in snap.runs if r.path == str(path)]
    assert found, [r.path for r in snap.runs]
    return found[0]


async def _until(poller, path, pred, polls=60, pause=0.25):
    r = None
    for _ in range(polls):
        r = await _run(poller, path)
        if pred(r):
            return r
        await asyncio.sleep(pause)
    raise AssertionError(f"never reached: {r}")


@pytest.fixture
def host(spare_fleet, tmp_path):
    h = spare_fleet.add("hf")
    return load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml"))), h


async def test_followed_from_its_log_between_saves_then_killed_is_failed(host):
    fleet, h = host
    run = h.runs / "run-8"
    p = start_trainer(run, 400, 0.05)
    try:
        async with Poller(fleet) as poller:
            # between saves: the step comes from tqdm's counter, ahead of the newest checkpoint
            r = await _until(
                poller,
                run,
                lambda r: (
                    r.step is not None
                    and r.step % SAVE
                    and r.state == "running"
                    and r.loss is not None
                ),
            )
            assert r.max_steps == 400 and r.seconds_per_step == pytest.approx(0.05)
            assert r.eta_seconds and r.eta_seconds > 0
            saved = [c.step for c in r.checkpoints]
            assert not saved or r.step > max(saved), (r.step, saved)
            # SIGSTOP: stalled at once, saying so; SIGCONT: running again
            os.kill(p.pid, signal.SIGSTOP)
            r = await _until(poller, run, lambda r: r.state == "stalled", polls=2, pause=0.1)
            assert "is stopped (state T" in (r.reason or "") and r.eta_seconds is None
            os.kill(p.pid, signal.SIGCONT)
            r = await _until(poller, run, lambda r: r.state == "running", polls=2, pause=0.1)
            # killed: failed within two polls, the process named
            p.kill()
            p.wait()
            r = await _until(poller, run, lambda r: r.state == "failed", polls=2, pause=0.1)
            assert f"its trainer (pid {p.pid}" in r.reason and "without a final adapter" in r.reason
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


async def test_dies_of_an_error_failed_with_its_logs_last_error_and_finished_when_whole(host):
    fleet, h = host
    dying, fine = h.runs / "run-9", h.runs / "run-10"
    p1 = start_trainer(dying, 400, 0.05, die_at=30)
    p2 = start_trainer(fine, 40, 0.05)
    try:
        async with Poller(fleet) as poller:
            await _until(poller, dying, lambda r: r.state == "running")
            await _until(poller, fine, lambda r: r.state == "running")
            r = await _until(poller, dying, lambda r: r.state == "failed")
            assert "its log's last error: RuntimeError: CUDA out of memory" in r.reason, r.reason
            r = await _until(poller, fine, lambda r: r.state == "finished" and r.adapter)
            assert r.adapter == str(fine / "adapter") and p2.wait(10) == 0
    finally:
        for p in (p1, p2):
            if p.poll() is None:
                p.kill()
                p.wait()


async def test_past_its_last_step_but_still_saving_is_running_until_the_adapter_is_written(host):
    """The last step's counter is in the log, the trainer still writes its adapter: `running`
    (saying so), never `finished` with no adapter to show; `finished` once the adapter is whole."""
    fleet, h = host
    run = h.runs / "run-11"
    p = start_trainer(run, 20, 0.02, hold=True)
    try:
        async with Poller(fleet) as poller:
            r = await _until(poller, run, lambda r: r.step == 20)
            assert r.state == "running" and r.adapter is None, (r.state, r.reason)
            assert f"its trainer (pid {p.pid}) is still at work" in (r.reason or ""), r.reason
            assert r.eta_seconds is None
            (run / "hold-before-adapter").unlink()
            r = await _until(poller, run, lambda r: r.state == "finished")
            assert r.adapter == str(run / "adapter") and p.wait(10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_log_line_is_read_by_a_bounded_pattern_never_evaluated(tmp_path):
    from fleetdeck.backend.host.probe import run_log

    log = tmp_path / "train.log"
    log.write_text(
        "{'loss': __import__('os').system('touch pwned'), 'epoch': 1}\n"
        + "\r 10%|#  | 16/159 [00:29<04:20,  1.82s/it]" * 3
        + "\n{'loss': 2.9, 'grad_norm': 1.0}\n"
        + "x" * 30_000  # longer than a line is read (LINE), within the tail read (TAIL)
        + " 99/7 [junk]\n"
    )
    got = run_log.read(str(log))
    assert got["step"] == 16 and got["max_steps"] == 159 and got["sps"] == pytest.approx(1.82)
    assert got["loss"] == 2.9 and not (tmp_path / "pwned").exists()
    with open(log, "a") as f:  # appended: read from the kept offset
        f.write("\r 11%|#  | 17/159 [00:31<04:18,  3.00it/s]\n")
    got = run_log.read(str(log))
    assert got["step"] == 17 and got["sps"] == pytest.approx(1 / 3)
    with open(log, "a") as f:  # transformers 5 quotes each figure
        f.write("\r   \r{'loss': '2.312', 'grad_norm': '0.1474', 'learning_rate': '2.9e-05'}\n")
    assert run_log.read(str(log))["loss"] == 2.312


async def test_a_trainer_that_dies_while_its_host_restarts_is_still_failed(spare_fleet, tmp_path):
    """The controller hands a new probe what the last one remembered (`workers`): a trainer that
    died while sshd (and the probe with it) was down is `failed`, not `unknown`."""
    h = spare_fleet.add("hr")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    run = h.runs / "run-12"
    p = start_trainer(run, 10_000, 0.05)
    try:
        async with Poller(fleet) as poller:
            await _until(poller, run, lambda r: r.state == "running" and r.step and r.step > 3)
            await _until(poller, run, lambda r: r.state == "running")
            spare_fleet.kill("hr")  # sshd, its sessions and the resident probe go
            p.kill()
            p.wait()
            spare_fleet.start("hr")
            r = await _until(poller, run, lambda r: r.state != "running", polls=40, pause=0.3)
            assert r.state == "failed", (r.state, r.reason)
            assert f"its trainer (pid {p.pid}" in (r.reason or "")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


async def test_a_real_hugging_face_trainer_is_followed_between_saves_and_finishes(tmp_path):
    """A real `transformers.Trainer` (a tiny random Llama, LoRA, CPU) started by hand: its step
    comes from its own log between saves, and it ends `finished` with its adapter."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from support.cli import local_fleet
    from support.hf_real_trainer import SAVE as EVERY
    from support.hf_real_trainer import start_real_trainer

    fleet = load_fleet(local_fleet(tmp_path))
    run = tmp_path / "runs" / "run-hf"
    p = start_real_trainer(run, 40, 0.25)
    try:
        async with Poller(fleet) as poller:
            r = await _until(
                poller,
                run,
                lambda r: (
                    r.state == "failed"
                    or (r.state == "running" and r.step is not None and r.step % EVERY != 0)
                ),
                polls=400,
                pause=0.25,
            )
            assert r.state == "running", r.reason
            assert r.max_steps == 40 and r.seconds_per_step
            r = await _until(
                poller, run, lambda r: r.loss is not None and r.state == "running", polls=400
            )
            # its last step comes before its adapter is saved: finished, then with the adapter
            r = await _until(
                poller,
                run,
                lambda r: r.state == "failed" or (r.state == "finished" and r.adapter),
                polls=600,
                pause=0.5,
            )
            assert r.state == "finished" and r.adapter == str(run / "adapter"), r.reason
        assert p.wait(60) == 0, (run / "train.log").read_text()[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


async def test_run_failed_and_run_finished_page_once_for_runs_started_by_hand(host):
    """The alert engine over the resident probe's polls: the hand-started run that dies pages
    `run-failed` once, with its reason; the one that finishes pages `run-finished` once, when its
    adapter is there."""
    from fleetdeck.backend.fleet.alert_rules import AlertConfig
    from fleetdeck.backend.monitor.rules.alerts import AlertEngine

    fleet, h = host
    dying, fine = h.runs / "run-20", h.runs / "run-21"
    p1 = start_trainer(dying, 400, 0.05, die_at=30)
    p2 = start_trainer(fine, 40, 0.05)
    engine = AlertEngine(AlertConfig(event_hold_minutes=60))
    fired: list[tuple[str, str, str]] = []
    try:
        async with Poller(fleet) as poller:
            for _ in range(200):
                snap = await poller.poll()
                assert snap.hosts[0].reachable, snap.hosts[0].error
                for a in engine.evaluate(snap):
                    if a.rule in ("run-failed", "run-finished"):
                        fired.append((a.rule, a.state, a.subject))
                        if a.rule == "run-failed":
                            assert "CUDA out of memory" in a.text, a.text
                done = {(r, s) for r, _, s in fired}
                if {("run-failed", str(dying)), ("run-finished", str(fine))} <= done:
                    break
                await asyncio.sleep(0.2)
            for _ in range(5):  # and nothing more on the polls after
                for a in engine.evaluate(await poller.poll()):
                    if a.rule in ("run-failed", "run-finished"):
                        fired.append((a.rule, a.state, a.subject))
                await asyncio.sleep(0.2)
    finally:
        for p in (p1, p2):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sorted(fired) == [
        ("run-failed", "firing", str(dying)),
        ("run-finished", "firing", str(fine)),
    ], fired


def test_hostile_inputs_to_the_log_reader_and_the_worker_memory(tmp_path):
    """A trainer restarted into the same log with `>` is read afresh (its old error gone); a log
    in a folder that only shares a prefix with the runs root is not the run's; workers handed
    back with times no clock has are ignored, and the runs section still answers."""
    from fleetdeck.backend.host.probe import run_log, run_state

    log = tmp_path / "train.log"
    log.write_text("RuntimeError: CUDA error: an illegal memory access\n")
    assert "CUDA error" in run_log.read(str(log))["error"]
    log.write_text("loading model\n\r  1%|#  | 2/159 [00:02<02:37,  1.00s/it]\n" + "x" * 80 + "\n")
    got = run_log.read(str(log))
    assert got.get("error") is None and got["step"] == 2
    assert run_log._beside("/data/runs/a", "/data/runs/a/logs/t.log")
    assert run_log._beside("/data/runs/a", "/data/runs/a.log")
    assert not run_log._beside("/data/runs/a", "/data/runs_old/x/y.log")
    assert not run_log._beside("/x", "/etc/passwd")
    run_state.adopt(
        {
            "/r/a": [5, 6, "python t.py", 10**400, None, True],
            "/r/b": [5, 6, "python t.py", 1e300, None, True],
            "/r/c": [5, 6, "python t.py", float("nan"), None, True],
            "/r/d": [5, 6, "python t.py", 1.0e9, None, True],
        }
    )
    w = run_state._workers()
    assert "/r/d" in w and not {"/r/a", "/r/b", "/r/c"} & set(w)


def test_a_header_with_absurd_dimensions_is_refused_at_once(tmp_path):
    import json
    import struct

    from fleetdeck.backend.host.lib import layout

    ck = tmp_path / "checkpoint-1"
    ck.mkdir()
    (ck / "adapter_config.json").write_text("{}")
    header = {"w": {"dtype": "F32", "shape": [10**3000] * 200, "data_offsets": [0, 8]}}
    raw = json.dumps(header).encode()
    (ck / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"x" * 8)
    why = layout.checkpoint_problem(str(ck))  # returns at once (a hang meets pytest's timeout)
    assert "no sane shape" in why
