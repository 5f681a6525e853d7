"""Run facts that must stay bounded or exact: a huge progress.jsonl, appends after first sight."""

from __future__ import annotations

import json
from pathlib import Path

from fleetdeck.backend import probe_runs
from fleetdeck.backend.probe_common import _CACHE


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
    _CACHE.clear()
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
