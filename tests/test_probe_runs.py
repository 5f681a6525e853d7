"""Run facts that must stay bounded or exact: a huge progress.jsonl, appends after first sight."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetdeck.backend.host.probe import runs as probe_runs
from fleetdeck.backend.host.probe.common import CACHE


def test_a_huge_progress_file_is_read_from_its_tail_then_incrementally(tmp_path: Path):
    run = tmp_path / "runs" / "big"
    run.mkdir(parents=True)
    line = '{"step": %d, "max_steps": 1000000, "loss": 2.5, "seconds_per_step": 0.5, "time": %d}\n'
    path = run / "progress.jsonl"
    with open(path, "w") as f:
        for s in range(1, 400_001):                       # ~30 MB, well over the tail window
            f.write(line % (s, 1_700_000_000 + s))
    size = path.stat().st_size
    assert size > 4 * probe_runs.PROGRESS_TAIL
    CACHE.clear()
    p = probe_runs._progress(str(path))
    assert p["step"] == 400_000 and p["max_steps"] == 1_000_000
    assert p["skipped_bytes"] >= size - probe_runs.PROGRESS_TAIL   # the head was never parsed
    assert p["losses"][0][0] > 300_000 and p["losses"][-1] == [400_000, 2.5]
    with open(path, "a") as f:
        f.write(json.dumps({"step": 400_001, "max_steps": 1_000_000, "loss": 2.4}) + "\n")
    p = probe_runs._progress(str(path))
    assert p["step"] == 400_001 and p["losses"][-1] == [400_001, 2.4]
    assert p["offset"] == path.stat().st_size


def test_a_failed_run_carries_the_reason_its_run_json_gives(tmp_path: Path):
    from test_probe import probe

    run = tmp_path / "runs" / "oom"
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text('{"step": 60, "max_steps": 300, "loss": 1.9}\n')
    (run / "run.json").write_text(json.dumps({"state": "failed", "error": "CUDA out of memory at step 61"}))
    (r,) = probe({"runs": [str(tmp_path / "runs")]})["runs"]
    assert r["state"] == "failed" and r["reason"].startswith("CUDA out of memory at step 61")


def test_a_run_whose_trainer_is_gone_is_failed_though_another_process_sits_in_its_folder(tmp_path: Path):
    """run.json names its trainer by pid and start time; that process ended. A stranger's
    process working in the folder (here a python sleeping with its cwd there) is not the
    trainer: the run is failed, not running or stalled, and shows no ETA."""
    import subprocess
    import sys
    import time

    from test_probe import probe

    from fleetdeck.backend.host.lib import procfs

    run = tmp_path / "runs" / "run-9"
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text(json.dumps({"step": 5, "max_steps": 100, "loss": 2.0,
                                                    "seconds_per_step": 1.0, "time": time.time()}) + "\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    start = procfs.start_ticks(gone.pid)
    gone.wait()
    (run / "run.json").write_text(json.dumps({"state": "running", "pid": gone.pid, "start_ticks": start or 1}))
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=run)
    try:
        time.sleep(0.3)
        (r,) = probe({"runs": [str(tmp_path / "runs")], "fresh": True})["runs"]
        assert r["state"] == "failed", r
        assert f"pid {gone.pid} is gone" in r["reason"]
        assert r["eta_seconds"] is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_stalled_run_shows_no_eta(tmp_path: Path):
    import subprocess
    import sys
    import time

    from test_probe import probe

    run = tmp_path / "runs" / "run-s"
    run.mkdir(parents=True)
    prog = run / "progress.jsonl"
    prog.write_text(json.dumps({"step": 5, "max_steps": 100, "loss": 2.0, "seconds_per_step": 1.0}) + "\n")
    old = time.time() - 3600
    os.utime(prog, (old, old))
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run)], cwd=run)
    try:
        time.sleep(0.3)
        (r,) = probe({"runs": [str(tmp_path / "runs")], "fresh": True})["runs"]
        assert r["state"] == "stalled", r
        assert r["eta_seconds"] is None
    finally:
        trainer.kill()
        trainer.wait()
