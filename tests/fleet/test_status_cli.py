"""`fleetdeck status` at 80 columns: one line per host, no cell wrapped over lines."""

from __future__ import annotations

import os
import subprocess
import sys


def test_status_fits_80_columns_without_wrapping_a_cell(tmp_path):
    long_root = tmp_path / ("a-very-long-runs-folder-name-" * 3) / "runs"
    long_root.mkdir(parents=True)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        f'[hosts.a-long-host-name-01]\nlocal = true\nruns = ["{long_root}"]\n'
        f'[hosts.b]\nlocal = true\nruns = ["{long_root}", "{tmp_path}/missing"]\n'
    )
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(hosts)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert p.returncode == 0, p.stderr
    # the table, without the warnings printed under it
    lines = [
        line
        for line in p.stdout.splitlines()
        if not line.startswith(("a-long-host-name-01:", "b:", "nvidia"))
    ]
    body = [
        line
        for line in lines
        if line.strip()
        and not line.strip().startswith(("fleet", "host", "─"))
        and "no NVIDIA driver" not in line
    ]
    # host a: one disk, one line; host b: two disks, two lines (one per disk, none wrapped)
    assert [line.split()[0] for line in body if not line.startswith(" " * 8)] == [
        "a-long-host-name-01",
        "b",
    ]
    assert len(body) == 3, body


def test_a_failed_run_is_counted_as_failed_not_idle(tmp_path):
    import json

    runs = tmp_path / "runs"
    for name, state in (("oom", "failed"), ("done", "finished")):
        (runs / name).mkdir(parents=True)
        (runs / name / "progress.jsonl").write_text('{"step": 60, "max_steps": 300, "loss": 1.9}\n')
        (runs / name / "run.json").write_text(
            json.dumps({"state": state, "error": "CUDA out of memory"})
        )
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[hosts.a]\nlocal = true\nruns = ["{runs}"]\n')
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(hosts)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if line.strip().startswith("a "))
    assert "1 failed" in row and "idle" not in row, row


def test_status_names_the_fleet_file_it_used(tmp_path):
    import json

    hosts = tmp_path / ("a-long-folder-name-" * 5) / "hosts.toml"
    hosts.parent.mkdir()
    hosts.write_text("[hosts.a]\nlocal = true\n")
    base = [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(hosts)]
    env = {**os.environ, "COLUMNS": "80"}
    p = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    title = p.stdout.splitlines()[0]
    # piped, the path is whole whatever COLUMNS says (a path is what a script copies)
    assert title.strip() == f"fleet from {hosts}", title
    p = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert json.loads(p.stdout)["fleet"] == str(hosts)


def test_a_down_host_shows_unknown_counts_not_zero(tmp_path):
    import socket

    from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Schedule
    from fleetdeck.tui.fleet_state import FleetState
    from fleetdeck.tui.rows.fleet import COLUMNS, host_cells
    from fleetdeck.tui.views.fleet import layout_widths

    with socket.socket() as s:  # a port nothing listens on: the host is DOWN at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        f'[hosts.a]\nlocal = true\n[hosts.gone]\naddress = "127.0.0.1"\nport = {port}\n'
        'user = "nobody"\nconnect_timeout = 5\n'
    )
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(hosts)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert p.returncode == 1, p.stderr
    row = next(line for line in p.stdout.splitlines() if line.strip().startswith("gone "))
    assert row.split()[-2:] == ["-", "-"], row  # live runs and stray: unknown
    # the dashboard: a host never seen up, and one seen up with a stray schedule and then down
    stray = Schedule(
        id="c-" + "0" * 32,
        host="b",
        kind="crontab",
        user="u",
        spec="* * * * *",
        command="x",
        source="crontab -l",
        stray=True,
        reasons=("unacknowledged",),
    )
    state = FleetState(["gone", "b"], 5.0, clock=lambda: 100.0)
    state.apply(
        FleetSnapshot(
            hosts=(
                HostSnapshot(name="gone", reachable=False, error="refused", time=1.0),
                HostSnapshot(name="b", reachable=True, time=1.0, schedules=(stray,)),
            ),
            time=1.0,
        )
    )
    w = layout_widths(120)
    col = [k for k in COLUMNS if k in w].index("stray")
    assert host_cells(state, "b", w)[0][col].plain == "1"
    assert host_cells(state, "gone", w)[0][col].plain == "-"
    state.apply(
        FleetSnapshot(
            hosts=(HostSnapshot(name="b", reachable=False, error="refused", time=50.0),), time=50.0
        )
    )
    assert host_cells(state, "b", w)[0][col].plain == "-"
