"""`fleetdeck status` at 80 columns: one line per host, no cell wrapped over lines."""

from __future__ import annotations

import os
import subprocess
import sys


def test_status_fits_80_columns_without_wrapping_a_cell(tmp_path):
    long_root = tmp_path / ("a-very-long-runs-folder-name-" * 3) / "runs"
    long_root.mkdir(parents=True)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[hosts.a-long-host-name-01]\nlocal = true\nruns = ["{long_root}"]\n'
                     f'[hosts.b]\nlocal = true\nruns = ["{long_root}", "{tmp_path}/missing"]\n')
    p = subprocess.run([sys.executable, "-m", "fleetdeck.tui.cli", "status", "--hosts", str(hosts)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    # the table, without the warnings printed under it
    lines = [line for line in p.stdout.splitlines() if not line.startswith(("a-long-host-name-01:", "b:", "nvidia"))]
    assert all(len(line) <= 80 for line in lines), lines
    body = [line for line in lines if line.strip() and not line.strip().startswith(("fleet", "host", "─"))
            and "no NVIDIA driver" not in line]
    # host a: one disk, one line; host b: two disks, two lines (one per disk, none wrapped)
    assert [line.split()[0] for line in body if not line.startswith(" " * 8)] == ["a-long-host-name-01", "b"]
    assert len(body) == 3, body


def test_a_failed_run_is_counted_as_failed_not_idle(tmp_path):
    import json

    runs = tmp_path / "runs"
    for name, state in (("oom", "failed"), ("done", "finished")):
        (runs / name).mkdir(parents=True)
        (runs / name / "progress.jsonl").write_text('{"step": 60, "max_steps": 300, "loss": 1.9}\n')
        (runs / name / "run.json").write_text(json.dumps({"state": state, "error": "CUDA out of memory"}))
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[hosts.a]\nlocal = true\nruns = ["{runs}"]\n')
    p = subprocess.run([sys.executable, "-m", "fleetdeck.tui.cli", "status", "--hosts", str(hosts)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if line.strip().startswith("a "))
    assert "1 failed" in row and "idle" not in row, row


def test_status_names_the_fleet_file_it_used(tmp_path):
    import json

    hosts = tmp_path / ("a-long-folder-name-" * 5) / "hosts.toml"
    hosts.parent.mkdir()
    hosts.write_text('[hosts.a]\nlocal = true\n')
    base = [sys.executable, "-m", "fleetdeck.tui.cli", "status", "--hosts", str(hosts)]
    env = {**os.environ, "COLUMNS": "80"}
    p = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    title = p.stdout.splitlines()[0]
    assert title.startswith("fleet from …") and title.endswith("-name-/hosts.toml") and len(title) <= 80, title
    p = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert json.loads(p.stdout)["fleet"] == str(hosts)
