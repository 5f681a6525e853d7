"""History: a real SQLite file in WAL mode, series read back, downsampling and retention, and a
corrupt or locked database as a warning rather than a crash."""

from __future__ import annotations

import io
import re
import sqlite3

import pytest
from rich.console import Console

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run
from fleetdeck.backend.monitor.history.store import History, history_path
from fleetdeck.show.charts import collect, history_table

T0 = 1_800_000_000


def snap(t: float, used: float = 1000, up: bool = True, evals=((25, 3.2),)) -> FleetSnapshot:
    g = Gpu(
        index=0,
        name="H100",
        uuid="GPU-a",
        unified_memory=False,
        memory_total_mib=81559,
        memory_used_mib=used,
        utilization_pct=50,
    )
    d = Disk(
        path="~/runs", mount="/", fstype="ext4", total_bytes=100, used_bytes=int(used), free_bytes=7
    )
    r = Run(
        host="h1",
        path="/r/run-1",
        name="run-1",
        state="running",
        step=int(used),
        loss=2.5,
        eval_losses=tuple(evals),
    )
    h1 = HostSnapshot(
        name="h1", reachable=True, time=t, gpus=(g,), disks=(d,), runs=(r,), latency_ms=3.5
    )
    h2 = (
        HostSnapshot(name="h2", reachable=True, time=t)
        if up
        else HostSnapshot(name="h2", reachable=False, error="down", time=t)
    )
    return FleetSnapshot(hosts=(h1, h2), time=t)


def test_polls_fold_into_minutes_in_wal_mode_under_the_state_folder():
    h = History()
    assert h.path == history_path() and "fleetdeck" in str(h.path)
    for i in range(36):  # three minutes of 5 s polls; h2 stops answering halfway through
        assert h.record(snap(T0 + 5 * i, used=1000 + 7 * (i % 12), up=i < 18))
    # a minute keeps its peak GPU memory (and its mean utilisation)
    assert h.gpu_memory("h1", T0) == {0: [1077, 1077, 1077]}
    assert [(t - T0, b) for t, _, b in h.series("h1", "gpu", T0)["0:GPU-a"]] == [
        (0, 50),
        (60, 50),
        (120, 50),
    ]
    # a disk keeps its last figure of the minute
    assert [a for _, a, _ in h.series("h1", "disk", T0)["~/runs"]] == [1077, 1077, 1077]
    # up: the share of the minute's polls answered
    assert [a for _, a, _ in h.series("h2", "host", T0)[""]] == [1.0, 0.5, 0.0]
    assert h.last_up("h2") == T0 + 60
    h.close()
    with sqlite3.connect(h.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert (
            db.execute("SELECT count(*) FROM samples").fetchone()[0] == 3 * 6
        )  # a row per series per minute: h1 host, gpu, disk, run, eval; h2 host


def test_old_minutes_fold_into_ten_minutes_and_the_retention_drops_the_oldest(tmp_path):
    h = History(tmp_path / "h.sqlite3", raw_hours=1, retention_days=1)
    for i in range(24):  # twenty minutes of one-minute polls; memory steps up halfway
        h.record(snap(T0 + 60 * i, used=1000 + 10 * (i // 10) + (i % 2)))
    h.event(T0, "h1", "seat-check", "port 8000", "logprob-unserialisable")
    h.flush()  # the minute in progress too
    h.maintain(T0 + 2 * 3600)
    pts = h.series("h1", "gpu", 0)["0:GPU-a"]
    assert [(t - T0, a) for t, a, _ in pts] == [(0, 1001), (600, 1011), (1200, 1021)]  # the peaks
    with sqlite3.connect(h.path) as db:
        assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    h.maintain(T0 + 2 * 86400)
    assert h.series("h1", "gpu", 0) == {} and h.events() == []


def test_a_series_whose_rows_all_passed_the_retention_is_dropped_and_made_again_when_seen(tmp_path):
    """The series table holds one row per (host, kind, name) ever seen: every run a fleet
    started. Once all of a series' rows are past the retention, its row goes too."""
    h = History(tmp_path / "h.sqlite3", raw_hours=1, retention_days=1)
    for i in range(3):
        h.record(snap(T0 + 60 * i))
    h.flush()

    def names():
        with sqlite3.connect(h.path) as db:
            return sorted(k for (k,) in db.execute("SELECT kind FROM series"))

    assert "gpu" in names()
    h.maintain(T0 + 3600 * 3)  # folded into ten-minute rows, still inside the retention
    assert "gpu" in names()
    h.maintain(T0 + 2 * 86400)  # every row past the retention: the series row goes
    assert names() == []
    h.record(snap(T0 + 2 * 86400 + 10))  # seen again: written under a new row, read back
    h.flush()
    assert "gpu" in names() and h.series("h1", "gpu", T0 + 86400)["0:GPU-a"]


def test_a_corrupt_database_is_a_warning_never_a_crash(tmp_path):
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"this is not a database at all" * 100)
    h = History(path)
    assert h.record(snap(T0)) is False
    assert h.gpu_memory("h1", 0) == {} and h.last_up("h1") is None
    assert len(h.warnings) == 1 and "history" in h.warnings[0] and "not a database" in h.warnings[0]


def test_a_locked_database_is_a_warning_and_the_next_poll_is_written(tmp_path):
    path = tmp_path / "history.sqlite3"
    h = History(path, busy_ms=50)
    assert h.record(snap(T0))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    other.execute("INSERT INTO meta VALUES ('lock', 1)")
    assert h.record(snap(T0 + 60)) is False  # the first minute is due, and cannot be written
    assert any("locked" in w for w in h.warnings)
    other.execute("ROLLBACK")
    other.close()
    assert h.record(snap(T0 + 120))  # written now, nothing lost
    assert [t for t, _, _ in h.series("h1", "gpu", 0)["0:GPU-a"]] == [T0, T0 + 60, T0 + 120]


def test_an_unwritable_state_folder_is_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    h = History(blocker / "history.sqlite3")
    assert h.record(snap(T0)) is False and h.events() == []
    assert "cannot open it" in h.warnings[0]


def test_a_retention_past_any_date_keeps_everything(tmp_path):
    # [alerts] history_retention_days only has to be finite: 1e308 days is past every date
    h = History(tmp_path / "h.sqlite3", raw_hours=1e308, retention_days=1e308)
    assert h.record(snap(T0)) and h.flush()
    h.maintain(T0 + 3600)
    assert h.warnings == [] and h.gpu_memory("h1", 0) == {0: [1000]}


def test_reads_since_any_number_answer(tmp_path):
    # `watch` reads back a disk_rate_window before now: a window of 1e308 s starts before any row
    h = History(tmp_path / "h.sqlite3")
    assert h.record(snap(T0))
    for since in (-1e308, float("-inf"), float("nan"), 0):
        assert h.gpu_memory("h1", since) == {0: [1000]}
        assert h.events(since) == []
    assert h.warnings == []
    assert h.gpu_memory("h1", float("inf")) == {} and h.gpu_memory("h1", 10**400) == {}


def h3(
    t: float, loss: float, disk_used: float, used: float = 1000, util: float = 50
) -> FleetSnapshot:
    """One poll of h3: run-9's loss and eval loss, a disk, one GPU."""
    g = Gpu(
        index=0,
        name="H100",
        uuid="GPU-a",
        unified_memory=False,
        memory_total_mib=81559,
        memory_used_mib=used,
        utilization_pct=util,
    )
    d = Disk(
        path="/tank",
        mount="/tank",
        fstype="zfs",
        total_bytes=2**30,
        used_bytes=int(disk_used),
        free_bytes=2**30 - int(disk_used),
    )
    r = Run(
        host="h3",
        path="/runs/run-9",
        name="run-9",
        state="running",
        step=int(t - T0),
        loss=loss,
        eval_losses=((int(t - T0), loss),),
    )
    return FleetSnapshot(
        hosts=(HostSnapshot(name="h3", reachable=True, time=t, gpus=(g,), disks=(d,), runs=(r,)),),
        time=t,
    )


def lines(h: History, since: float, window: float, width: int) -> dict[str, list[str]]:
    """`history_table` of h3 as printed, {series label: [sparkline (its drawn cells), first, last, peak]}."""
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None, soft_wrap=False).print(
        history_table(collect(h, "h3", since, window, width), "h3", window, width)
    )
    rows = (
        re.fullmatch(r"(.*?) +([▁▂▃▄▅▆▇█ ]*[▁▂▃▄▅▆▇█]) +(\S+) +(\S+) +(\S+) *", line)
        for line in buf.getvalue().splitlines()
    )
    return {m[1].strip(): [m[2].strip(), m[3], m[4], m[5]] for m in rows if m}


def test_first_and_last_are_the_windows_oldest_and_newest_values_not_a_cells_peak(tmp_path):
    # twenty minutes at the end of a one-day window of twenty cells: all in the last cell
    h = History(tmp_path / "h.sqlite3")
    for i in range(21):
        h.record(
            h3(
                T0 + 60 * i,
                loss=3.007 - (3.007 - 2.435) * i / 20,
                disk_used=(464 - 64 * i / 20) * 2**20,
            )
        )
    now = T0 + 20 * 60
    rows = lines(h, now - 86400, 86400, 20)
    assert rows["run-9 eval loss"][1:] == ["3.007", "2.435", "3.007"]
    assert rows["run-9 loss"][1:] == ["3.007", "2.435", "3.007"]
    assert rows["disk /tank"][1:] == ["464M", "400M", "464M"]


def test_a_chart_cell_folds_by_kind_a_loss_by_its_newest_value_memory_by_its_peak(tmp_path):
    # two ten-minute cells. In the first the loss spikes to 4.0 and is back at 2.0 by its end,
    # memory peaks at 8000 MiB and falls to 2000, and the GPU is busy one minute of ten; in the
    # second the loss holds at 2.5, memory at 4000 and utilisation at 50%
    h = History(tmp_path / "h.sqlite3")
    for i in range(20):
        first = i < 10
        loss = (4.0 if i == 3 else 2.0) if first else 2.5
        used = (8000 if i == 5 else 2000) if first else 4000
        util = (100 if i == 0 else 0) if first else 50
        h.record(h3(T0 + 60 * i, loss=loss, disk_used=2**29, used=used, util=util))
    rows = lines(h, T0, 1200, 2)
    # the loss stands at 2.0 then 2.5 (its range: low, high); read by the peak it would stand at 4.0 first
    assert rows["run-9 loss"] == ["▁█", "2", "2.5", "4"]
    # memory: the peak (8000 MiB, the top of its scale), then 4000 of 8000; read by the newest it would be 2000
    assert rows["GPU0 memory"][0] == "█▅"
    # utilisation: the mean, 10% then 50%, not one busy minute's 100%
    assert rows["GPU0 utilisation"] == ["▂▅", "100%", "50%", "100%"]


def test_ten_minute_rows_keep_the_newest_loss_and_disk_figure_and_the_peak_memory(tmp_path):
    h = History(tmp_path / "h.sqlite3", raw_hours=1)
    for i in range(20):
        h.record(
            h3(
                T0 + 60 * i,
                loss=3.0 - i / 10,
                disk_used=(500 - i) * 2**20,
                used=1000 + (i % 10 == 2) * 5000,
            )
        )
    h.flush()
    h.maintain(T0 + 3 * 3600)
    with sqlite3.connect(h.path) as db:
        assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    assert [(t - T0, round(b, 6)) for t, _, b in h.series("h3", "run", 0)["/runs/run-9"]] == [
        (0, 2.1),
        (600, 1.1),
    ]
    assert [(t - T0, round(b, 6)) for t, _, b in h.series("h3", "eval", 0)["/runs/run-9"]] == [
        (0, 2.1),
        (600, 1.1),
    ]
    assert [a / 2**20 for _, a, _ in h.series("h3", "disk", 0)["/tank"]] == [491, 481]
    assert [a for _, a, _ in h.series("h3", "gpu", 0)["0:GPU-a"]] == [6000, 6000]


def test_a_cards_temperature_and_power_are_kept_by_their_peak_and_mean_and_a_silent_card_has_none(
    tmp_path,
):
    """Kind `gpuh`: a minute, a ten-minute row and a chart cell keep the card's hottest reading
    and its mean power; a card whose driver reports neither (GB10's power, nvidia-smi without
    the fields) writes no row, and the chart has no line for it."""
    from dataclasses import replace

    def poll(t: float, temp: int | None, watts: float | None) -> FleetSnapshot:
        s = h3(t, loss=2.0, disk_used=2**29)
        host = s.hosts[0]
        g = replace(host.gpus[0], temperature_c=temp, power_w=watts)
        silent = replace(host.gpus[0], index=1, uuid="GPU-b")
        return replace(s, hosts=(replace(host, gpus=(g, silent)),))

    h = History(tmp_path / "h.sqlite3", raw_hours=1)
    for i in range(
        20
    ):  # ten minutes at 60 °C and 300 W with one at 88 °C and 700 W, then ten at 70 °C, 500 W
        first = i < 10
        h.record(
            poll(
                T0 + 60 * i,
                (88 if i == 4 else 60) if first else 70,
                (700.0 if i == 4 else 300.0) if first else 500.0,
            )
        )
    h.record(poll(T0 + 1200, None, None))  # the minute after: the card said nothing
    rows = lines(h, T0, 1200, 2)
    assert rows["GPU0 temperature"] == [
        "▇▆",
        "60°C",
        "70°C",
        "88°C",
    ]  # peaks 88 and 70 on 0..100 °C
    assert rows["GPU0 power"] == ["▆█", "300W", "500W", "700W"]  # means 340 and 500 on 0..500 W
    assert "GPU1 temperature" not in rows and "GPU1 power" not in rows and "GPU1 memory" in rows
    assert set(h.series("h3", "gpuh", 0)) == {"0:GPU-a"}
    h.flush()
    h.maintain(T0 + 3 * 3600)  # past raw_hours: folded into ten-minute rows by the same rule
    assert [(t - T0, a, round(b, 6)) for t, a, b in h.series("h3", "gpuh", 0)["0:GPU-a"]] == [
        (0, 88, 340.0),
        (600, 70, 500.0),
    ]
    h.close()


def test_the_charts_cells_and_figures_are_its_rows_folded_by_kind_minute_and_ten_minute_rows_alike(
    tmp_path,
):
    """What SQLite works out for the chart (`History.chart`) is what the rule gives over the rows
    themselves (`fold` a cell, `summarise` a figure), over a window of ten-minute rows and
    minute rows, polls that miss, figures that are sometimes absent, and several widths."""
    import random

    from fleetdeck.backend.monitor.history.figures import fold, fold_of, summarise
    from fleetdeck.show.charts import KINDS, cell_seconds

    rng = random.Random(31)
    h = History(tmp_path / "h.sqlite3", raw_hours=2, retention_days=30)
    for i in range(8 * 60):
        t = T0 + 60 * i + rng.randint(0, 50)
        g = Gpu(
            index=0,
            name="H100",
            uuid="GPU-a",
            unified_memory=False,
            memory_total_mib=81559,
            memory_used_mib=rng.choice([1000, 8000, rng.randint(0, 80000)]),
            utilization_pct=rng.choice([0, 100, None]),
        )
        d = Disk(
            path="/tank",
            mount="/tank",
            fstype="zfs",
            total_bytes=10**12,
            used_bytes=rng.randint(0, 10**12),
            free_bytes=rng.choice([None, rng.randint(0, 10**11)]),
        )
        r = Run(
            host="h1",
            path="/r/run-1",
            name="run-1",
            state="running",
            step=i,
            loss=rng.choice([None, rng.random()]),
            eval_losses=((i, rng.random()),) if i % 7 == 0 else (),
        )
        host = HostSnapshot(
            name="h1",
            reachable=rng.random() > 0.1,
            time=t,
            gpus=(g,),
            disks=(d,),
            runs=(r,),
            latency_ms=rng.random() * 30,
        )
        h.record(FleetSnapshot(hosts=(host,), time=t))
    with sqlite3.connect(h.path) as db:
        assert db.execute("SELECT count(*) FROM samples_10m").fetchone()[0] > 0
    now = T0 + 8 * 3600
    checked = 0
    for window, width in ((3600, 10), (6 * 3600, 37), (9 * 3600, 120), (86400, 1000)):
        since = now - window + 0.5
        step = cell_seconds(window, width)
        chart = h.chart("h1", since, step, width)
        for kind in KINDS:
            rows = h.series("h1", kind, since)
            assert sorted(chart.get(kind, {})) == sorted(rows)
            for name, pts in rows.items():
                for i in (0, 1):
                    line, s = chart[kind][name][i], summarise(pts, i)
                    if s is None:
                        assert line is None
                        continue
                    buckets: list[list[float]] = [[] for _ in range(width)]
                    for p in pts:
                        if p[1 + i] is not None:
                            buckets[min(width - 1, max(0, int((p[0] - since) // step)))].append(
                                p[1 + i]
                            )
                    want = [fold(b, fold_of(kind, i)) for b in buckets]
                    assert line.cells == pytest.approx(want, rel=1e-12, abs=1e-9), (
                        kind,
                        name,
                        i,
                        width,
                    )
                    assert (
                        line.first,
                        line.first_t,
                        line.last,
                        line.last_t,
                        line.peak,
                        line.rows,
                    ) == (s.first, s.first_t, s.last, s.last_t, s.peak, s.rows)
                    checked += 1
    assert checked >= 4 * 9


def _big(path, minutes: int, n_series: int = 20) -> int:
    """A history database of `n_series` series of host h1, a minute row each for `minutes`
    minutes up to T0, written straight into SQLite (the recorder's schema); returns its rows."""
    from fleetdeck.backend.monitor.history.db import SCHEMA

    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(SCHEMA)
    kinds = ["gpu", "disk", "run", "eval", "host"]
    db.executemany(
        "INSERT INTO series VALUES (?, 'h1', ?, ?)",
        [
            (s + 1, kinds[s % 5], f"{s}:GPU-{s}" if s % 5 == 0 else f"/s/{s}")
            for s in range(n_series)
        ],
    )
    start = T0 - 60 * minutes
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO samples VALUES (?, ?, ?, ?)",
        (
            (start + 60 * m, s, float((m * 7 + s) % 5000), (m % 97) / 97)
            for m in range(minutes)
            for s in range(1, n_series + 1)
        ),
    )
    db.execute("COMMIT")
    db.close()
    return minutes * n_series


def test_a_300k_row_window_is_drawn_and_written_as_json_holding_cells_and_chunks_never_its_rows(
    tmp_path,
):
    """300,000 rows (20 series x 15,000 minutes) in the window: the chart holds `width` values
    a figure and `--json` one chunk of rows at a time, measured by tracemalloc as the peak of
    what Python allocates while each runs. Holding the rows, as a list of (t, a, b) tuples, is
    about 150 bytes a row: 45 MB here (54 MB at its peak, measured), against a bound of 8 MiB."""
    import tracemalloc

    from fleetdeck.cli.history import write_json

    path = tmp_path / "big.sqlite3"
    assert _big(path, 15_000) == 300_000
    since = T0 - 15_000 * 60
    h = History(path)
    h.names("h1")  # opened outside the measure

    class Sink:
        """Counts what is written and keeps nothing."""

        n = 0

        def write(self, s: str) -> None:
            self.n += len(s)

    tracemalloc.start()
    try:
        chart = collect(h, "h1", since, 15_000 * 60, 100)
        _, chart_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        sink = Sink()
        assert write_json(h, "h1", since, T0, sink)
        _, json_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(len(v) for v in chart.values()) == 20
    assert all(
        len(line.cells) == 100 for v in chart.values() for a, b in v.values() for line in (a, b)
    )
    assert chart["gpu"]["0:GPU-0"][0].rows == 15_000
    assert sink.n > 300_000 * 20  # every row was written
    assert chart_peak < 8 * 2**20, chart_peak
    assert json_peak < 8 * 2**20, json_peak
    assert h.warnings == []
