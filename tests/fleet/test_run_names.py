"""A run is named the same way in every command (`layout.resolve_run` on the host): its folder's
name under a runs root, a path under one, or its absolute path. `logs`, `runs --series`,
`purge --keep-newest` and `wait` all take `HOST run-8`; a name two roots hold is refused naming
both. Real loopback sshd host with two runs roots."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.purge import make_run

pytestmark = pytest.mark.sshd


def _cli(fleet, *args):
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def two_roots(spare_fleet, tmp_path):
    h = spare_fleet.add("nm")
    other = h.runs.parent / "more-runs"
    other.mkdir()
    fleet = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", per_host={"nm": {"runs": [str(h.runs), str(other)]}}
    )
    return fleet, h.runs, other


def _trainer_state(run, steps):
    for s in steps:
        (run / "checkpoints" / f"checkpoint-{s}" / "trainer_state.json").write_text(
            json.dumps(
                {
                    "global_step": s,
                    "max_steps": 100,
                    "log_history": [{"step": x, "loss": 3.0 - x / 100} for x in range(5, s + 1, 5)],
                }
            )
        )


def test_a_run_name_works_in_every_command(two_roots):
    fleet, runs, _ = two_roots
    run = make_run(runs, "run-8", steps=(25, 50, 75), adapter=False)
    _trainer_state(run, (25, 50, 75))
    (run / "train.log").write_text("hello\n")

    out = _cli(fleet, "logs", "nm", "run-8", "-n", "1")
    assert out.returncode == 0 and out.stdout == "hello\n", out.stderr

    out = _cli(fleet, "runs", "--series", "nm:run-8", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["path"] == str(run) and [s for s, _ in doc["losses"]][-1] == 75

    out = _cli(fleet, "purge", "nm", "run-8", "--keep-newest", "1", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["keep_newest"]["kept"] == [str(run / "checkpoints" / "checkpoint-75")]


def test_a_name_two_roots_hold_is_refused_naming_both(two_roots):
    fleet, runs, other = two_roots
    a = make_run(runs, "run-6", steps=(25, 50), adapter=False)
    b = make_run(other, "run-6", steps=(25, 50), adapter=False)
    out = _cli(fleet, "logs", "nm", "run-6")
    assert out.returncode == 2 and "(ambiguous-run)" in out.stderr, out.stderr
    assert str(a) in out.stderr and str(b) in out.stderr
    out = _cli(fleet, "purge", "nm", "run-6", "--keep-newest", "1", "--dry-run", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode != 0 and doc["keep_newest"]["refusal"]["code"] == "ambiguous-run"
    out = _cli(fleet, "wait", "nm", "run-6", "--timeout", "5s")
    assert out.returncode == 2 and "names 2 runs" in out.stderr, out.stderr
    # the path names one
    out = _cli(fleet, "purge", "nm", str(a), "--keep-newest", "1", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
