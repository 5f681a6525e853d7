"""Every sink holds whatever a host says: SQLite history and the Prometheus exposition take NUL,
lone surrogates (names that were not UTF-8), integers past 64 bits and past a float's range,
NaN and the infinities, and very long strings, each through the sink's one rule; and a real sshd
host with a non-UTF-8 run folder and a huge step is watched, recorded and scraped."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, GpuProcess, HostSnapshot, Run
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.history.store import History
from fleetdeck.backend.monitor.history.values import TEXT_MAX, sql_number, sql_text
from fleetdeck.backend.monitor.metrics.export import FleetCollector, serve_metrics
from fleetdeck.backend.monitor.metrics.values import LABEL_MAX, label, sample

T0 = 1_800_000_000
HUGE = 10**400  # no float holds it
WIDE = 2**70  # past SQLite's 64-bit INTEGER, within a float
LONG = "r" * 20_000
NAMES = ("run-\udcff\x1b[2J", "nul-\x00-in", "lone-\ud800", LONG, LONG + "x")


def hostile(t: float) -> FleetSnapshot:
    """A poll in which every field a host fills holds something no sink takes as it is."""
    g = Gpu(
        index=0,
        name="H\udcff",
        uuid="GPU-\x00",
        unified_memory=False,
        memory_total_mib=HUGE,
        memory_used_mib=math.nan,
        utilization_pct=math.inf,
        processes=(
            GpuProcess(pid=7, user="u\udcfe", used_mib=HUGE, command="x\x00"),
            GpuProcess(pid=8, user="u", used_mib=-math.inf, command="y"),
        ),
    )
    d = Disk(
        path="/tank/\udcff",
        mount="/\x00",
        fstype="zfs",
        total_bytes=WIDE,
        used_bytes=HUGE,
        free_bytes=-HUGE,
    )
    runs = tuple(
        Run(
            host="h1",
            path=f"/r/{n}",
            name=n,
            state="running",
            step=WIDE,
            max_steps=HUGE,
            loss=math.nan,
            eval_loss=math.inf,
            eta_seconds=-math.inf,
            eval_losses=((HUGE, math.nan),),
        )
        for n in NAMES
    )
    seat = Seat(
        host="h1",
        kind="vllm\udcff",
        port=8000,
        model="m\x00",
        pid=7,
        pids=(7,),
        restarts=WIDE,
        memory_by_gpu={0: HUGE, 1: 1.5},
    )
    h = HostSnapshot(
        name="h1",
        reachable=True,
        time=t,
        latency_ms=HUGE,
        memory_total_bytes=HUGE,
        memory_used_bytes=WIDE,
        load1=math.nan,
        gpus=(g,),
        disks=(d,),
        runs=runs,
        seats=(seat,),
    )
    return FleetSnapshot(hosts=(h,), time=t)


@pytest.mark.parametrize(
    "v,want",
    [
        ("plain /r/run-1 é", "plain /r/run-1 é"),  # ordinary text is unchanged
        ("run-\udcff", "run-\\xff"),  # a byte that was not UTF-8
        ("a\x00b", "a\\x00b"),  # SQLite's string functions stop at NUL
        ("lone-\ud800", "lone-\\ud800"),  # a surrogate that surrogateescape never makes
        (None, ""),
        (7, "7"),
    ],
)
def test_sql_text_is_valid_utf8_without_nul(v, want):
    assert sql_text(v) == want


def test_sql_text_caps_long_strings_and_keeps_two_apart():
    a, b = sql_text(LONG), sql_text(LONG + "x")
    assert len(a) == len(b) == TEXT_MAX and a != b and a.startswith("rrr")


@pytest.mark.parametrize(
    "v,want",
    [
        (1.5, 1.5),
        (3, 3.0),
        (WIDE, float(WIDE)),
        (HUGE, None),
        (-HUGE, None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (True, None),
        ("3", None),
        (None, None),
    ],
)
def test_sql_number_is_a_finite_float_or_null(v, want):
    assert sql_number(v) == want


@pytest.mark.parametrize(
    "v,want",
    [
        ("run-1", "run-1"),
        ("run-\udcff\x1b[2J", "run-\\xff\\x1b[2J"),
        ("a\x00b", "a\\x00b"),
        ("back\\slash", "back\\\\slash"),
        ("lone-\ud800", "lone-\\ud800"),
        (None, ""),
        (8000, "8000"),
    ],
)
def test_label_is_printable_utf8(v, want):
    assert label(v) == want


def test_label_caps_long_strings_and_keeps_two_apart():
    a, b = label(LONG), label(LONG + "x")
    assert len(a) == len(b) == LABEL_MAX and a != b


@pytest.mark.parametrize(
    "v,want",
    [
        (1.5, 1.5),
        (WIDE, float(WIDE)),
        (HUGE, math.inf),
        (-HUGE, -math.inf),
        (math.inf, math.inf),
        (-math.inf, -math.inf),
        (True, None),
        ("3", None),
        (None, None),
    ],
)
def test_sample_is_a_float_or_nothing(v, want):
    assert sample(v) == want


def test_sample_keeps_nan():
    assert math.isnan(sample(math.nan))


def test_history_records_a_hostile_poll(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    for i in range(3):  # three minutes: rows folded, written and read back
        assert h.record(hostile(T0 + 60 * i)), h.warnings
    assert h.event(
        math.nan, "h1", "alert-firing", "run-stalled /r/run-\udcff", "text \x00 \ud800 " + LONG
    )
    assert h.warnings == []
    runs = h.series("h1", "run", T0)
    assert set(runs) == {
        "/r/run-\\xff\x1b[2J",
        "/r/nul-\\x00-in",
        "/r/lone-\\ud800",
        sql_text("/r/" + LONG),
        sql_text("/r/" + LONG + "x"),
    }
    assert {pts[0][1:] for pts in runs.values()} == {
        (float(WIDE), None)
    }  # step kept, NaN loss NULL
    assert [p[1:] for p in h.series("h1", "disk", T0)["/tank/\\xff"]] == [(None, None)] * 3
    (gpu,) = h.series("h1", "gpu", T0).values()
    assert gpu[0][1:] == (None, None)
    assert h.series("h1", "host", T0)[""][0][1:] == (1.0, None)
    (ev,) = h.events()
    assert (
        ev["t"] == 0 and ev["subject"] == "run-stalled /r/run-\\xff" and len(ev["text"]) == TEXT_MAX
    )
    h.close()
    with sqlite3.connect(h.path) as db:  # what is stored compares whole in SQL
        assert (
            db.execute(
                "SELECT count(*) FROM series WHERE kind = 'run' AND name = ? AND length(name) = ?",
                ("/r/nul-\\x00-in", len("/r/nul-\\x00-in")),
            ).fetchone()[0]
            == 1
        )


@pytest.fixture
def served():
    c = FleetCollector()
    server, port = serve_metrics("127.0.0.1", 0, c)
    yield c, f"http://127.0.0.1:{port}/metrics"
    server.shutdown()
    server.server_close()


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        text = r.read().decode("utf-8")
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_the_exporter_serves_a_hostile_poll(served):
    c, url = served
    c.update(hostile(T0), [], {})
    m = scrape(url)
    by_name = {s.labels["run"]: s.value for s in m["fleetdeck_run_step"]}
    assert set(by_name) == {label(n) for n in NAMES} and len(by_name) == len(NAMES)
    assert by_name["run-\\xff\\x1b[2J"] == float(WIDE)
    assert {s.value for s in m["fleetdeck_run_max_steps"]} == {math.inf}
    assert all(math.isnan(s.value) for s in m["fleetdeck_run_loss"])
    assert {s.value for s in m["fleetdeck_run_eval_loss"]} == {math.inf}
    assert {s.value for s in m["fleetdeck_run_eta_seconds"]} == {-math.inf}
    assert [s.value for s in m["fleetdeck_host_latency_seconds"]] == [math.inf]
    assert [s.value for s in m["fleetdeck_disk_free_bytes"]] == [-math.inf]
    assert m["fleetdeck_disk_free_bytes"][0].labels == {
        "host": "h1",
        "path": "/tank/\\xff",
        "mount": "/\\x00",
    }
    assert [s.labels["uuid"] for s in m["fleetdeck_gpu_memory_used_bytes"]] == ["GPU-\\x00"]
    assert [s.value for s in m["fleetdeck_seat_memory_bytes"]] == [math.inf]
    assert [s.value for s in m["fleetdeck_seat_restarts"]] == [float(WIDE)]


@pytest.mark.sshd
async def test_watch_records_and_serves_a_host_with_a_non_utf8_run(spare_fleet, tmp_path):
    """A real sshd host whose runs root holds `run-\\xff\\x1b[2J` (not UTF-8, with a terminal
    escape) with a live process in it and a progress file whose step is 2**70: two polls are
    written to history and /metrics answers 200 with the name escaped."""
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.cli.watch import Watcher

    h1 = spare_fleet.add("h1")
    run = os.fsencode(h1.runs) + b"/run-\xff\x1b[2J"
    os.mkdir(run)
    with open(run + b"/progress.jsonl", "w") as f:
        f.write(json.dumps({"step": WIDE, "max_steps": 2**80, "loss": 2.5, "time": T0}) + "\n")
        f.write(
            json.dumps(
                {"step": WIDE, "max_steps": 2**80, "loss": 2.5, "eval_loss": 3.0, "time": T0}
            )
            + "\n"
        )
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], cwd=run)
    c = FleetCollector()
    server, port = serve_metrics("127.0.0.1", 0, c)
    try:
        fleet = parse_fleet(spare_fleet.fleet_toml(), str(tmp_path / "hosts.toml"))
        w = Watcher(fleet, collector=c, history=History(tmp_path / "history.sqlite3"))
        await w.run(count=2, interval=0.2)
        m = scrape(f"http://127.0.0.1:{port}/metrics")
        states = {s.labels["run"]: s.labels["state"] for s in m["fleetdeck_run_state"]}
        assert states == {"run-\\xff\\x1b[2J": "running"}
        assert w.history.warnings == []
        paths = set(w.history.series("h1", "run", 0))
        assert paths == {
            os.fsdecode(run).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        }
    finally:
        worker.kill()
        worker.wait()
        server.shutdown()
        server.server_close()
