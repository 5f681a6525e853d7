"""Run facts that must stay bounded or exact: a huge progress.jsonl, appends after first sight."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetdeck.backend.host.probe import run_progress
from fleetdeck.backend.host.probe import runs as probe_runs
from fleetdeck.backend.host.probe.common import CACHE

from support.weights import safetensors


def test_a_huge_progress_file_is_read_from_its_tail_then_incrementally(tmp_path: Path):
    run = tmp_path / "runs" / "big"
    run.mkdir(parents=True)
    line = '{"step": %d, "max_steps": 1000000, "loss": 2.5, "seconds_per_step": 0.5, "time": %d}\n'
    path = run / "progress.jsonl"
    with open(path, "w") as f:
        for s in range(1, 400_001):  # ~30 MB, well over the tail window
            f.write(line % (s, 1_700_000_000 + s))
    size = path.stat().st_size
    assert size > 4 * run_progress.PROGRESS_TAIL
    CACHE.clear()
    p = run_progress.progress(str(path))
    assert p["step"] == 400_000 and p["max_steps"] == 1_000_000
    assert p["skipped_bytes"] >= size - run_progress.PROGRESS_TAIL  # the head was never parsed
    assert p["losses"][0][0] > 300_000 and p["losses"][-1] == [400_000, 2.5]
    with open(path, "a") as f:
        f.write(json.dumps({"step": 400_001, "max_steps": 1_000_000, "loss": 2.4}) + "\n")
    p = run_progress.progress(str(path))
    assert p["step"] == 400_001 and p["losses"][-1] == [400_001, 2.4]
    assert p["offset"] == path.stat().st_size


def test_a_failed_run_carries_the_reason_its_run_json_gives(tmp_path: Path):
    from support.probe import probe

    run = tmp_path / "runs" / "oom"
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text('{"step": 60, "max_steps": 300, "loss": 1.9}\n')
    (run / "run.json").write_text(
        json.dumps({"state": "failed", "error": "CUDA out of memory at step 61"})
    )
    (r,) = probe({"runs": [str(tmp_path / "runs")]})["runs"]
    assert r["state"] == "failed" and r["reason"].startswith("CUDA out of memory at step 61")


def test_a_run_whose_trainer_is_gone_is_failed_though_another_process_sits_in_its_folder(
    tmp_path: Path,
):
    """run.json names its trainer by pid and start time; that process ended. A stranger's
    process working in the folder (here a python sleeping with its cwd there) is not the
    trainer: the run is failed, not running or stalled, and shows no ETA."""
    import subprocess
    import sys
    import time

    from fleetdeck.backend.host.lib import procfs

    from support.probe import probe

    run = tmp_path / "runs" / "run-9"
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text(
        json.dumps(
            {"step": 5, "max_steps": 100, "loss": 2.0, "seconds_per_step": 1.0, "time": time.time()}
        )
        + "\n"
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    start = procfs.start_ticks(gone.pid)
    gone.wait()
    (run / "run.json").write_text(
        json.dumps({"state": "running", "pid": gone.pid, "start_ticks": start or 1})
    )
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

    from support.probe import probe

    run = tmp_path / "runs" / "run-s"
    run.mkdir(parents=True)
    prog = run / "progress.jsonl"
    prog.write_text(
        json.dumps({"step": 5, "max_steps": 100, "loss": 2.0, "seconds_per_step": 1.0}) + "\n"
    )
    old = time.time() - 3600
    os.utime(prog, (old, old))
    trainer = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(run)], cwd=run
    )
    try:
        time.sleep(0.3)
        (r,) = probe({"runs": [str(tmp_path / "runs")], "fresh": True})["runs"]
        assert r["state"] == "stalled", r
        assert r["eta_seconds"] is None
    finally:
        trainer.kill()
        trainer.wait()


def test_every_layout_the_run_listing_reads_has_a_series(tmp_path: Path, capsys):
    """`runs --series` reads a run where the listing does (fleetdeck's `checkpoints/checkpoint-N/`,
    Hugging Face's `checkpoint-N/` beside the run, a trainer_state.json at the run's root,
    progress.jsonl); a run without any of them is refused in the listing's words."""
    from support.cli import local_fleet, run_cli
    from support.probe import checkpoint, hf_state, write_progress

    hosts = local_fleet(tmp_path)
    root = tmp_path / "runs"
    nested, beside, top, prog, bare = (
        root / n for n in ("run-nested", "run-hf", "run-root", "run-prog", "run-bare")
    )
    for s in (25, 50):
        checkpoint(nested, s)
        checkpoint(beside, s, nested=False)
    top.mkdir()
    (top / "trainer_state.json").write_text(json.dumps(hf_state(75)))
    prog.mkdir()
    write_progress(prog, range(1, 31))
    (bare / "adapter").mkdir(parents=True)  # a finished run's adapter only: no series anywhere
    (bare / "adapter" / "adapter_config.json").write_text("{}")
    (bare / "adapter" / "adapter_model.safetensors").write_bytes(safetensors(b"\0" * 64))
    rc, out, err = run_cli(["--hosts", hosts, "runs", "--json"], capsys)
    assert rc == 0, err
    listed = {r["path"]: r for r in json.loads(out)["runs"]}
    assert set(listed) == {str(p) for p in (nested, beside, top, prog, bare)}
    for run in (nested, beside, top, prog):
        r = listed[str(run)]
        assert r["losses"], run
        rc, out, err = run_cli(
            ["--hosts", hosts, "runs", "--series", f"local:{run}", "--json"], capsys
        )
        assert rc == 0, (run, err)
        doc = json.loads(out)
        assert (doc["losses"], doc["eval_losses"]) == (r["losses"], r["eval_losses"]), run
    assert listed[str(nested)]["eval_losses"] == [[25, 3.176], [50, 3.173]]
    assert listed[str(beside)]["losses"][-1] == [50, 3.35]
    assert listed[str(bare)]["losses"] == []
    rc, out, err = run_cli(["--hosts", hosts, "runs", "--series", f"local:{bare}"], capsys)
    assert (
        rc == 1
        and "holds neither progress.jsonl nor trainer_state.json" in err
        and "(no-series)" in err
    )


def test_the_series_op_reads_the_newest_trainer_state_as_the_listing_does(tmp_path: Path):
    """Checkpoints in both places and a run-root trainer_state.json older than the newest
    checkpoint's: the listing and the `series` op read the same, newest file."""
    from support.probe import checkpoint, hf_state

    run = tmp_path / "runs" / "run-mixed"
    checkpoint(run, 25)
    (run / "trainer_state.json").write_text(json.dumps(hf_state(25)))
    old = os.stat(run / "trainer_state.json").st_mtime - 60
    os.utime(run / "trainer_state.json", (old, old))
    checkpoint(run, 100, nested=False)
    names = set(os.listdir(run))
    kind, src, states = run_progress.series_source(str(run), names)
    assert (kind, src) == ("trainer_state", str(run / "checkpoint-100" / "trainer_state.json"))
    assert [s for s, _ in states] == [25, 100]
    CACHE.clear()
    facts = probe_runs._run_facts(str(run), names, 0.0)[0]
    series = run_progress.full_series(str(run))
    assert facts["step"] == 100 and (series["losses"], series["eval_losses"]) == (
        facts["losses"],
        facts["eval_losses"],
    )


def test_each_checkpoint_says_whether_it_is_complete(tmp_path: Path):
    """The listing judges checkpoints by the host library's one rule: a save killed half-way,
    an empty folder and zero-byte weights are incomplete, with what they lack; a name with a
    trailing newline or a step past 2**63 - 1 is no checkpoint at all."""
    from support.probe import probe

    run = tmp_path / "runs" / "hf"
    for step in (100, 200, 300, 400):
        (run / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
    for step in (100, 300):
        (run / "checkpoints" / f"checkpoint-{step}" / "adapter_model.safetensors").write_bytes(
            safetensors(b"w" * 8)
        )
        (run / "checkpoints" / f"checkpoint-{step}" / "adapter_config.json").write_text("{}")
    (run / "checkpoints" / "checkpoint-300" / "adapter_model.safetensors").write_bytes(b"")
    (run / "checkpoints" / "checkpoint-400" / "trainer_state.json").write_text(
        '{"global_step": 400}'
    )
    (run / "checkpoints" / "checkpoint-500\n").mkdir()
    (run / "checkpoints" / "checkpoint-99999999999999999999").mkdir()
    CACHE.clear()
    (r,) = probe({"runs": [str(tmp_path / "runs")]})["runs"]
    got = {c["step"]: (c["complete"], c["problem"]) for c in r["checkpoints"]}
    assert got == {
        100: (True, None),
        200: (False, "incomplete: empty"),
        300: (False, "incomplete: adapter_model.safetensors is empty (0 bytes)"),
        400: (False, "incomplete: trainer_state.json only"),
    }


def test_a_deeply_nested_run_file_is_an_error_on_the_run_not_a_crash(tmp_path: Path):
    """A trainer_state.json or run.json nested 100,000 deep (any user on the host can write one)
    reads as that run's error; the probe answers, and the other runs are listed as usual."""
    from support.probe import probe

    deep = "[" * 100_000 + "]" * 100_000
    for name, fname in (("deep-state", "trainer_state.json"), ("deep-manifest", "run.json")):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / fname).write_text(deep)
    ok = tmp_path / "runs" / "fine"
    ok.mkdir()
    (ok / "progress.jsonl").write_text('{"step": 3, "max_steps": 9, "loss": 2.0}\n' + deep + "\n")
    CACHE.clear()
    got = {r["name"]: r for r in probe({"runs": [str(tmp_path / "runs")]})["runs"]}
    assert set(got) == {"deep-state", "deep-manifest", "fine"}
    assert got["fine"]["step"] == 3
    for name in ("deep-state", "deep-manifest"):
        text = json.dumps(got[name])
        assert "it nests 100000 levels" in text, text[:500]


def test_a_fifo_where_a_run_file_was_expected_never_holds_the_probe(tmp_path: Path):
    """Any user who can write in a runs root can put a FIFO where run.json, progress.jsonl or a
    trainer_state.json belongs; the probe must answer (the run's error names it), not wait for a
    writer that never comes. Run in a child with a deadline, so a hang fails instead of holding
    the suite."""
    import subprocess
    import sys

    for name, fname in (("m", "run.json"), ("p", "progress.jsonl"), ("t", "trainer_state.json")):
        (tmp_path / "runs" / name).mkdir(parents=True)
        os.mkfifo(tmp_path / "runs" / name / fname)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]); from support.probe import probe; "
        "rep = probe({'runs': [sys.argv[1]]}); "
        "print(json.dumps([{r['name']: r.get('reason') for r in rep['runs']}, rep['warnings']]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "runs"), str(Path(__file__).parents[1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    runs, warnings = json.loads(r.stdout)
    assert "not a regular file" in runs["m"]  # run.json: the run's own reason
    for name, fname in (
        ("p", "progress.jsonl"),
        ("t", "trainer_state.json"),
    ):  # the run is named in warnings
        assert any(
            w.startswith(f"run {tmp_path / 'runs' / name}: ")
            and f"{fname}" in w
            and "not a regular file" in w
            for w in warnings
        ), warnings


def test_s_per_step_is_the_median_of_the_recent_steps_and_the_eta_is_reckoned_from_it(
    tmp_path: Path,
):
    """One slow step (a save, an eval) at the end: the run's s/step stays the median of its
    last MEDIAN_STEPS logged step times, the ETA with it; the last step's own figure is beside it."""
    import subprocess
    import sys
    import time

    from support.probe import probe

    run = tmp_path / "runs" / "run-m"
    run.mkdir(parents=True)
    now = time.time()
    lines = [
        {
            "step": s,
            "max_steps": 1000,
            "loss": 2.0,
            "seconds_per_step": 0.5 if s % 7 else 0.7,
            "time": now - 100 + s,
        }
        for s in range(1, 40)
    ]
    lines.append(
        {"step": 40, "max_steps": 1000, "loss": 2.0, "seconds_per_step": 30.0, "time": now}
    )
    (run / "progress.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    # a run logging no per-step time: the time between its lines, over the steps between them
    timed = tmp_path / "runs" / "run-t"
    timed.mkdir()
    stamps = [now - 200 + 2 * s for s in range(1, 31)] + [now]
    (timed / "progress.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "max_steps": 100, "loss": 2.0, "time": t}) + "\n"
            for s, t in enumerate(stamps, 1)
        )
    )
    trainers = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(d)], cwd=d)
        for d in (run, timed)
    ]
    try:
        time.sleep(0.3)
        got = {
            r["name"]: r for r in probe({"runs": [str(tmp_path / "runs")], "fresh": True})["runs"]
        }
        r = got["run-m"]
        assert r["state"] == "running", r
        assert r["seconds_per_step"] == 0.5 and r["last_seconds_per_step"] == 30.0
        assert r["step_times"] == run_progress.MEDIAN_STEPS == 20
        assert r["eta_seconds"] == (1000 - 40) * 0.5
        t = got["run-t"]
        assert (
            t["seconds_per_step"] == 2.0
            and t["last_seconds_per_step"] > 50
            and t["step_times"] == 20
        )
        assert t["eta_seconds"] == (100 - 31) * 2.0
    finally:
        for p in trainers:
            p.kill()
            p.wait()
    # appended lines move the median, read incrementally
    with open(run / "progress.jsonl", "a") as f:
        for s in range(41, 61):
            f.write(
                json.dumps({"step": s, "max_steps": 1000, "loss": 2.0, "seconds_per_step": 0.25})
                + "\n"
            )
    (r,) = [x for x in probe({"runs": [str(tmp_path / "runs")]})["runs"] if x["name"] == "run-m"]
    assert r["seconds_per_step"] == 0.25 and r["step_times"] == 20
