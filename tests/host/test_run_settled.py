"""A run at its last step with no final adapter is undecided only while its files move: its
trainer may still be saving. Once its files (and the log in its folder) have been silent past
the stall window it is finished, and no process is looked for in it any more (the readlink of
every process's cwd each poll). Real run folders, real processes, mtimes set by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from support.probe import PROBE, probe, run_of, sleeper, write_progress


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_last_step_no_adapter_is_running_while_its_files_move_and_finished_once_silent(
    tmp_path, children
):
    run = tmp_path / "runs" / "run-end"
    run.mkdir(parents=True)
    write_progress(run, range(1, 21), max_steps=20, sps=2.0)
    p = sleeper(children, cwd=run)  # a process at work in the folder: saving, say
    req = {"runs": [str(tmp_path / "runs")], "stall_factor": 10}
    r = run_of(probe(req), run)
    assert (r["state"], r["pid"]) == ("running", p.pid), r["reason"]
    assert "still at work" in r["reason"]
    # silent for longer than the stall window (120 s at least): a one-shot probe never saw
    # its trainer at work, so no process is looked for: done
    _age(run / "progress.jsonl", 600)
    r = run_of(probe(req), run)
    assert (r["state"], r["pid"]) == ("finished", None), r["reason"]
    # a log in the folder written a moment ago: it may still be saving, so looked at again
    (run / "train.log").write_text("saving the adapter\n")
    r = run_of(probe(req), run)
    assert (r["state"], r["pid"]) == ("running", p.pid), r["reason"]
    _age(run / "train.log", 600)
    r = run_of(probe(req), run)
    assert (r["state"], r["pid"]) == ("finished", None), r["reason"]


def test_a_silent_run_short_of_its_last_step_is_still_looked_for(tmp_path, children):
    """The window only settles a run at its last step: one that stopped half way with its
    trainer still there is `stalled`, not finished."""
    run = tmp_path / "runs" / "run-mid"
    run.mkdir(parents=True)
    write_progress(run, range(1, 11), max_steps=20, sps=2.0)
    p = sleeper(children, cwd=run)
    _age(run / "progress.jsonl", 600)
    r = run_of(probe({"runs": [str(tmp_path / "runs")], "stall_factor": 10}), run)
    assert (r["state"], r["pid"]) == ("stalled", p.pid), r["reason"]


def test_a_resident_probe_keeps_the_trainer_it_saw_and_says_stalled_until_it_ends(
    tmp_path, children
):
    """Silent past the window, the run's one cheap look is the trainer seen working there
    before: `stalled` while that very process runs, `finished` once it has ended."""
    run = tmp_path / "runs" / "run-hung"
    run.mkdir(parents=True)
    write_progress(run, range(1, 21), max_steps=20, sps=2.0)
    p = sleeper(children, cwd=run)
    probe_proc = subprocess.Popen(
        [sys.executable, str(PROBE), "--resident"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    children.append(probe_proc)
    req = json.dumps({"runs": [str(tmp_path / "runs")], "stall_factor": 10}).encode() + b"\n"

    def ask() -> dict:
        assert probe_proc.stdin and probe_proc.stdout
        probe_proc.stdin.write(req)
        probe_proc.stdin.flush()
        return run_of(json.loads(probe_proc.stdout.readline()), run)

    assert (ask()["state"], ask()["pid"]) == ("running", p.pid)
    _age(run / "progress.jsonl", 600)
    r = ask()
    assert (r["state"], r["pid"]) == ("stalled", p.pid), r["reason"]
    assert "no progress for" in r["reason"]
    p.kill()
    p.wait()
    r = ask()
    assert (r["state"], r["pid"]) == ("finished", None), r["reason"]
