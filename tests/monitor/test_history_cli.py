"""`fleetdeck history HOST`: the recorded series of one host, as sparklines and as JSON, read
from a real history database written by the same recorder `watch` uses."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, HostSnapshot, Run
from fleetdeck.backend.monitor.history.store import History, history_path

from support.history import _night


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "history", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def test_history_shows_memory_creeping_up_and_the_losses_over_the_window():
    now = time.time()
    _night(now)
    out = _cli("gx10", "--since", "7h", "--width", "36")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "GPU0 memory" in text and "GPU0 utilisation" in text and "disk /tank" in text
    assert "loss" in text and "eval loss" in text and "answered" in text
    assert "\x1b" not in text and "run-\\x1b[2J7 loss" in text
    mem = next(line for line in text.splitlines() if "GPU0 memory" in line)
    bars = [c for c in mem if c in "▁▂▃▄▅▆▇█"]
    assert (
        bars
        and bars[-1] == "█"
        and bars[0] in "▁▂▃▄▅"
        and bars == sorted(bars, key="▁▂▃▄▅▆▇█".index)
    )
    # JSON: every recorded point of the window, oldest first
    doc = json.loads(_cli("gx10", "--since", "7h", "--json").stdout)
    gpu = doc["series"]["gpu"]["0:GPU-0"]
    assert len(gpu) >= 300 and gpu[0][1] < gpu[-1][1]
    assert doc["series"]["run"]["/runs/run-\x1b[2J7"][-1][2] < 3.0
    # a narrower window holds fewer points
    short = json.loads(_cli("gx10", "--since", "1h", "--json").stdout)
    assert 50 <= len(short["series"]["gpu"]["0:GPU-0"]) <= 62


def test_history_says_what_is_missing_and_refuses_a_bad_duration():
    out = _cli("gx10")
    assert out.returncode == 1 and "no history yet" in out.stderr
    _night(time.time())
    out = _cli("nobody")
    assert out.returncode == 0 and "nothing recorded for nobody in the last 1d00h" in out.stdout
    for bad in ("0h", "-5m", "tomorrow", "1e400s", "100000d"):
        out = _cli("gx10", f"--since={bad}")
        assert (
            out.returncode == 2
            and "is not a duration" in out.stderr
            and "Traceback" not in out.stderr
        )


def test_first_last_and_peak_are_the_windows_own_values_in_the_default_day():
    """A loss falling 3.007 -> 2.435 and a disk a purge took from 464M to 400M within the last
    half hour: one cell of the default day, whose peak is not the series' first or last."""
    now = time.time()
    h = History(history_path())
    for i in range(31):
        t = now - 30 * 60 + i * 60
        used = (464 if i < 20 else 400) * 2**20
        loss = 3.007 - (3.007 - 2.435) * i / 30
        host = HostSnapshot(
            name="h3",
            reachable=True,
            time=t,
            disks=(
                Disk(
                    path="/tank",
                    mount="/tank",
                    fstype="zfs",
                    total_bytes=2**30,
                    used_bytes=used,
                    free_bytes=2**30 - used,
                ),
            ),
            runs=(
                Run(
                    host="h3",
                    path="/runs/run-9",
                    name="run-9",
                    state="running",
                    step=i,
                    loss=loss + 0.1,
                    eval_losses=((i, loss),),
                ),
            ),
        )
        h.record(FleetSnapshot(hosts=(host,), time=t))
    h.close()
    out = _cli("h3")
    assert out.returncode == 0, out.stderr
    figures = {line.split("  ")[0].strip(): line.split()[-3:] for line in out.stdout.splitlines()}
    assert figures["run-9 eval loss"] == ["3.007", "2.435", "3.007"]
    assert figures["run-9 loss"] == ["3.107", "2.535", "3.107"]
    assert figures["disk /tank"] == ["464M", "400M", "464M"]
    doc = json.loads(_cli("h3", "--json").stdout)
    ev = doc["figures"]["eval"]["/runs/run-9"]["loss"]
    assert (ev["first"], ev["last"], ev["peak"], ev["fold"]) == (3.007, 2.435, 3.007, "last")
    assert ev["first_t"] < ev["last_t"] and ev["rows"] == len(doc["series"]["eval"]["/runs/run-9"])
    disk = doc["figures"]["disk"]["/tank"]["used_bytes"]
    assert (disk["first"], disk["last"], disk["peak"]) == (464 * 2**20, 400 * 2**20, 464 * 2**20)


def test_a_width_outside_10_to_1000_cells_is_refused_in_one_sentence():
    _night(time.time())
    for bad in ("-5", "0", "9", "1001", "100000000", "wide", "1e3"):
        out = _cli("gx10", f"--width={bad}")
        assert out.returncode == 2, (bad, out.stdout[-300:])
        assert "is not a sparkline width: a whole number of cells from 10 to 1000" in out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""
    for good in ("10", "1000"):
        out = _cli("gx10", "--width", good)
        assert out.returncode == 0 and "GPU0 memory" in out.stdout, out.stderr


def test_a_corrupt_database_is_one_sentence_naming_it_and_exit_1_never_nothing_recorded():
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(random.Random(5).randbytes(64 * 1024))
    for args in (("gx10",), ("gx10", "--json"), ("nobody",)):
        out = _cli(*args)
        assert out.returncode == 1, (args, out.stdout[-300:])
        assert f"the history database {path} cannot be read (file is not a database)" in out.stderr
        assert (
            "nothing recorded" not in out.stdout
            and out.stdout == ""
            and "Traceback" not in out.stderr
        )


def test_a_database_whose_rows_are_damaged_is_exit_1_and_the_json_says_why_in_its_warnings():
    """The series list reads, the rows' pages do not: the table is refused, and `--json`, already
    streaming, ends its document with the warning."""
    _night(time.time())
    path = history_path()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute("PRAGMA page_size").fetchone()[0]
        roots = [
            r
            for (r,) in db.execute(
                "SELECT rootpage FROM sqlite_master WHERE name IN ('samples', 'samples_10m')"
            )
        ]
    with open(path, "r+b") as f:
        for root in roots:
            f.seek((root - 1) * page)
            f.write(b"\xee" * page)
    out = _cli("gx10", "--since", "7h")
    assert out.returncode == 1 and "nothing recorded" not in out.stdout
    assert (
        f"the history database {path} cannot be read (database disk image is malformed)"
        in out.stderr
    )
    out = _cli("gx10", "--since", "7h", "--json")
    assert out.returncode == 1 and "cannot be read (database disk image is malformed)" in out.stderr
    doc = json.loads(out.stdout)
    assert doc["series"]["gpu"] == {} and doc["figures"]["gpu"] == {}
    assert any(str(path) in w and "malformed" in w for w in doc["warnings"])


def test_the_json_document_is_the_recorded_rows_written_as_they_are_read():
    """The streamed document holds what `History.series` reads, row for row, and each figure as
    `summarise` gives it over them."""
    from fleetdeck.backend.monitor.history.figures import figures

    now = time.time()
    _night(now)
    doc = json.loads(_cli("gx10", "--since", "7h", "--json").stdout)
    h = History(history_path())
    for kind in ("gpu", "gpuh", "disk", "run", "eval", "host", "seat"):
        rows = h.series("gx10", kind, doc["since"])
        assert doc["series"][kind] == {n: [list(p) for p in pts] for n, pts in rows.items()}
        assert doc["figures"][kind] == {n: figures(kind, pts) for n, pts in rows.items()}
    h.close()
    assert doc["warnings"] == [] and len(doc["series"]["gpu"]["0:GPU-0"]) == 360
