"""CLI tables: in a terminal they use its width (the free text sharing what the short columns
leave); piped, every value is whole (`2.1G/23.4G`, never `2.1G/23.…`)."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys

from rich.console import Console

from fleetdeck.cli.schedules import schedules_table
from fleetdeck.cli.status import fleet_table
from fleetdeck.cli.tables import WHOLE, listing_console

from support.recorded import recorded


def _render(renderable, width):
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def test_the_schedules_table_uses_a_wide_terminal_and_keeps_short_columns_on_one_line():
    snap = recorded("fleet.json")
    long = dataclasses.replace(
        snap.schedules[0], command="/home/ops/bin/check-run.sh " + "--flag value " * 12
    )
    rows = [long, *snap.schedules[1:]]
    text = _render(schedules_table(rows, rows, width=200), 200)
    lines = text.splitlines()
    assert max(len(line) for line in lines) == 200  # the width is used
    header = next(line for line in lines if " id " in line)
    assert "next run" in header and "next" not in lines[lines.index(header) + 1]  # not wrapped
    # the command folds into the room the short columns leave: far more than a ninth of it
    first = next(line for line in lines if "check-run.sh" in line)
    at = first.index("/home/ops/bin")
    assert len(first[at:].split("  ")[0]) > 40, first


def test_piped_listings_print_every_value_whole(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert listing_console(file=io.StringIO()).width == WHOLE  # pytest's stdout is no terminal
    monkeypatch.setenv("COLUMNS", "80")
    # piped, every value is whole whatever COLUMNS says: a run name is what a script copies
    assert listing_console(file=io.StringIO()).width == WHOLE
    snap = recorded("fleet.json")
    host = snap.hosts[0]
    big = dataclasses.replace(
        host, memory_used_bytes=int(2.1 * 2**30), memory_total_bytes=int(23.4 * 2**30)
    )
    snap = dataclasses.replace(snap, hosts=(big, *snap.hosts[1:]))
    narrow = _render(fleet_table(snap, 80), 80)
    whole = _render(fleet_table(snap, WHOLE), WHOLE)
    assert "…" not in whole and re.search(r"2\.1G/23\.4G", whole), whole
    assert "2.1G/23.4G" in whole and ("…" in narrow or "2.1G/23.4G" in narrow)


def test_fleetdeck_status_piped_prints_memory_whole(tmp_path):
    fleet = tmp_path / "hosts.toml"
    fleet.write_text("[hosts.here]\nlocal = true\nruns = []\n")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet), "status"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if re.match(r"\s*here\s+up", line))
    assert "…" not in row and re.search(r"\d[\d.]*[KMGT]?i?B?/\d[\d.]*[KMGT]", row), row
