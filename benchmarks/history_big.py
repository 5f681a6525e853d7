"""`fleetdeck history` over a big history: 150 series x 14 days of minute rows (3.0 M rows).

    python benchmarks/history_big.py [--days 14] [--series 150] [--repeat 1]

Builds, in a temporary state folder, the history database `watch` would hold for one host with
150 series (96 GPUs' memory and utilisation, 24 disks, 14 runs and 14 eval series, the host's
answers and one seat) and a row per series per minute for 14 days, all of them minute rows (the
ten-minute fold is not run, so every row is read: the worst case a 2w window can meet). Then it
runs, each as its own process (`python -m fleetdeck.cli.main`, output to a file),

    fleetdeck history big --since 2w            (the table: COLUMNS=180, so 120 cells wide)
    fleetdeck history big --since 2w --json     (every row of the window, streamed)

and prints each one's wall time, peak RSS (the child's own `ru_maxrss`, from `os.wait4`) and
output size. The baseline named in each line is the same command over the same series with a
tenth of the rows (1.4 days), in the same run: a ratio near 1 for RSS says memory does not
grow with the window's rows; the time ratio says what the rows cost.

To measure another build, point PYTHONPATH at an export of its tree as `fleetdeck` (as
benchmarks/tui_big.py does); the database is built by that build's schema.

    python benchmarks/history_big.py --size [--size-days 21] [--interval 5]

instead measures what the history of one host costs on disk over time: a host of 8 GPUs, 2
disks, 3 live runs with eval losses and a seat (18 series), polled every --interval seconds for
--size-days simulated days through `History.record` (so the minute rows, the hourly fold into
ten-minute rows and the 14-day retention run as in operation), printing the file's size (WAL
included) and its rows at the end of each simulated week, and after VACUUM at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOST = "big"


def kinds(n: int) -> list[tuple[str, str]]:
    """(kind, name) of `n` series of one host, GPUs first, as the recorder names them."""
    out: list[tuple[str, str]] = [("gpu", f"{i}:GPU-{i:08x}") for i in range(96)]
    out += [("disk", f"/tank/d{i}") for i in range(24)]
    out += [("run", f"/runs/run-{i}") for i in range(14)] + [
        ("eval", f"/runs/run-{i}") for i in range(14)
    ]
    out += [("host", ""), ("seat", "port 8000")]
    return out[:n]


def build(path: Path, days: float, n_series: int, now: int) -> int:
    """The database at `path`: a row per series per minute for `days` days up to `now`; returns
    how many rows it holds."""
    from fleetdeck.backend.monitor.history.db import SCHEMA

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    db.executescript(SCHEMA)
    series = kinds(n_series)
    db.executemany(
        "INSERT INTO series VALUES (?, ?, ?, ?)",
        [(i + 1, HOST, k, n) for i, (k, n) in enumerate(series)],
    )
    rng = random.Random(4919)
    minutes = int(days * 1440)
    start = now // 60 * 60 - (minutes - 1) * 60
    rows = 0
    db.execute("BEGIN")
    batch: list[tuple] = []
    for m in range(minutes):
        t = start + 60 * m
        for sid, (kind, _) in enumerate(series, 1):
            if kind == "gpu":
                a, b = float(20_000 + (m * 7 + sid * 13) % 50_000), float(rng.randint(0, 100))
            elif kind == "disk":
                a, b = float(4 * 10**11 + m * 10**6), float(6 * 10**11 - m * 10**6)
            elif kind in ("run", "eval"):
                a, b = float(m), 3.5 - 2.0 * m / minutes + rng.random() / 50
            elif kind == "host":
                a, b = float(rng.random() > 0.01), 20.0 + rng.random() * 5
            else:
                a, b = float(m // 5000), 30_000.0
            batch.append((t, sid, a, b))
        if len(batch) >= 100_000:
            db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", batch)
            rows += len(batch)
            batch.clear()
    db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", batch)
    rows += len(batch)
    # no fold due: the command reads the rows as they are
    db.execute("INSERT OR REPLACE INTO meta VALUES ('maintained_at', ?)", (float(now),))
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return rows


def measure(state: Path, args: list[str], out: Path) -> tuple[float, float, int, int]:
    """(wall seconds, peak RSS in MiB, exit status, output bytes) of one `fleetdeck history`."""
    env = dict(os.environ, XDG_STATE_HOME=str(state), COLUMNS="180")
    with open(out, "wb") as f:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", "fleetdeck.cli.main", "history", HOST, *args],
            stdout=f,
            stderr=subprocess.PIPE,
            env=env,
        )
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        print(f"  {' '.join(args)}: exit {p.returncode}: {err.strip()[-400:]}", file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, p.returncode, out.stat().st_size


def size(days: float, interval: float, db: Path) -> None:
    """One host's history through `History.record` over `days` simulated days (see the module's
    docstring), its size printed at the end of each week."""
    from types import SimpleNamespace

    from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run
    from fleetdeck.backend.monitor.history.store import History

    rng = random.Random(4919)
    t0 = 1_800_000_000.0  # after the database's creation: its first fold is due an hour in
    hist = History(db, retention_days=14)

    def on_disk() -> int:
        return sum(f.stat().st_size for f in db.parent.glob(db.name + "*"))

    def rows() -> tuple[int, int]:
        with sqlite3.connect(db) as c:
            return (
                c.execute("SELECT count(*) FROM samples").fetchone()[0],
                c.execute("SELECT count(*) FROM samples_10m").fetchone()[0],
            )

    seat = SimpleNamespace(key="port 8000", restarts=0, memory_by_gpu={"0": 30_000.0})
    n = int(days * 86400 / interval)
    started = time.perf_counter()
    for p in range(n):
        t = t0 + p * interval
        gpus = tuple(
            Gpu(
                index=g,
                name="H100",
                uuid=f"GPU-{g}",
                unified_memory=False,
                memory_total_mib=81_559.0,
                memory_used_mib=float(rng.randint(20_000, 80_000)),
                utilization_pct=float(rng.randint(0, 100)),
            )
            for g in range(8)
        )
        disks = tuple(
            Disk(
                path=f"/tank/{d}",
                mount="/tank",
                fstype="zfs",
                total_bytes=10**13,
                used_bytes=4 * 10**12 + p * 4096,
                free_bytes=6 * 10**12 - p * 4096,
            )
            for d in range(2)
        )
        runs = tuple(
            Run(
                host="h1",
                path=f"/runs/run-{r}",
                name=f"run-{r}",
                state="running",
                step=p // 12,
                loss=3.5 - p / n + rng.random() / 50,
                eval_losses=((p // 600, 3.6 - p / n),),
            )
            for r in range(3)
        )
        host = HostSnapshot(
            name="h1",
            reachable=rng.random() > 0.01,
            time=t,
            latency_ms=20 + rng.random() * 5,
            gpus=gpus,
            disks=disks,
            runs=runs,
            seats=(seat,),
        )
        hist.record(FleetSnapshot(hosts=(host,), time=t))
        if (p + 1) % int(7 * 86400 / interval) == 0:
            hist.flush()
            raw, folded = rows()
            print(
                f"  after {(p + 1) * interval / 86400:.0f} days: {on_disk() / 2**20:.2f} MiB on disk "
                f"({raw} minute rows, {folded} ten-minute rows)",
                flush=True,
            )
    hist.close()
    raw, folded = rows()
    with sqlite3.connect(db, isolation_level=None) as c:
        c.execute("VACUUM")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(
        f"one host of 18 series, {n} polls every {interval:g} s over {days:g} days (retention 14 days): "
        f"{on_disk() / 2**20:.2f} MiB after VACUUM ({raw} minute rows, {folded} ten-minute rows), "
        f"simulated in {time.perf_counter() - started:.0f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--series", type=int, default=150)
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of each command (the best is printed)"
    )
    ap.add_argument(
        "--size",
        action="store_true",
        help="measure one host's history on disk over --size-days instead",
    )
    ap.add_argument("--size-days", type=float, default=21.0)
    ap.add_argument(
        "--interval", type=float, default=5.0, help="seconds between simulated polls (--size)"
    )
    a = ap.parse_args()
    if a.size:
        with tempfile.TemporaryDirectory() as d:
            size(a.size_days, a.interval, Path(d) / "history.sqlite3")
        return 0
    now = int(time.time())
    commands = (["--since", "2w"], ["--since", "2w", "--json"])
    with tempfile.TemporaryDirectory() as d:
        results: dict[str, list[tuple[float, float, int, int]]] = {}
        sizes = {}
        for label, days in (("baseline", a.days / 10), ("big", a.days)):
            state = Path(d) / label
            (state / "fleetdeck").mkdir(parents=True)
            db = state / "fleetdeck" / "history.sqlite3"
            t0 = time.perf_counter()
            rows = build(db, days, a.series, now)
            sizes[label] = (rows, db.stat().st_size)
            print(
                f"{label}: {rows} rows ({a.series} series x {days:g} days of minute rows), "
                f"{db.stat().st_size / 2**20:.1f} MiB on disk, built in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            for cmd in commands:
                runs = [measure(state, cmd, Path(d) / "out") for _ in range(a.repeat)]
                results[f"{label} {' '.join(cmd)}"] = runs
                # the best wall time; the largest RSS
                wall = min(r[0] for r in runs)
                rss = max(r[1] for r in runs)
                print(
                    f"  history {HOST} {' '.join(cmd)}: {wall:.2f} s, peak RSS {rss:.1f} MiB, "
                    f"exit {runs[-1][2]}, {runs[-1][3] / 2**20:.1f} MiB of output",
                    flush=True,
                )
        print()
        for cmd in commands:
            key = " ".join(cmd)
            big, base = results[f"big {key}"], results[f"baseline {key}"]
            bw, brss = min(r[0] for r in big), max(r[1] for r in big)
            sw, srss = min(r[0] for r in base), max(r[1] for r in base)
            print(
                f"history {HOST} {key}: {sizes['big'][0]} rows {bw:.2f} s / {brss:.1f} MiB against the baseline's "
                f"{sizes['baseline'][0]} rows {sw:.2f} s / {srss:.1f} MiB: time x{bw / sw:.2f}, RSS x{brss / srss:.2f} "
                f"for x{sizes['big'][0] / sizes['baseline'][0]:.1f} the rows"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
