"""What alerts and history cost a poll cycle, and how big the history grows in a week.

Cycle cost: 50 recorded host answers shaped like the operator's boxes (4 GPUs with processes,
2 disks, 3 runs with 160-point loss and eval series, 10 schedules, 2 seats each). The baseline
is the controller's share of a poll without alerts or history: decoding each host's JSON
answer into a HostSnapshot and deciding stray schedules fleet-wide (`host_from_probe` +
`mark_stray`, what `Poller.poll` does after the answers arrive; network and probe time come on
top and are left out, which makes the ratio an upper bound). Added: `AlertEngine.evaluate` and
`History.record` of the same snapshot. Median of `--polls` cycles, after 5 warm-up cycles.

Size: a simulated week (`--days 7`) of 5 s polls of 50 hosts written through `History.record`
with simulated clock times, so the hourly downsampling and the retention run as they would.

    python benchmarks/alerts.py                       # cycle cost, 50 hosts
    python benchmarks/alerts.py --size --days 7       # plus the week of history (minutes)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from fleetdeck.backend.fleet.acks import Acks
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.schedule_verdict import mark_stray
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.monitor.history.store import History
from fleetdeck.backend.monitor.rules.alerts import AlertEngine

GIB_MIB = 1024


def host_answer(i: int, t: float, rng: random.Random) -> dict:
    """One probe answer as the host sends it."""
    gpus = []
    for g in range(4):
        procs = [
            {
                "pid": 1000 * i + 10 * g + k,
                "user": "svc",
                "used_mib": rng.uniform(2000, 30000),
                "command": f"python -m vllm.entrypoints.openai.api_server --port {8000 + k}",
            }
            for k in range(2)
        ]
        gpus.append(
            {
                "index": g,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": f"GPU-{i:03d}-{g}",
                "unified_memory": False,
                "memory_total_mib": 81559,
                "memory_used_mib": sum(p["used_mib"] for p in procs),
                "utilization_pct": rng.randint(0, 100),
                "processes": procs,
            }
        )
    disks = [
        {
            "path": p,
            "mount": m,
            "fstype": "ext4",
            "total_bytes": 2 * 2**40,
            "used_bytes": int(2**40 + t * 1000 + rng.randint(0, 2**20)),
            "free_bytes": 2**40,
        }
        for p, m in (("~/runs", "/"), ("/tank/erp-tune", "/tank"))
    ]
    runs = []
    for r in range(3):
        step = int(t / 20) % 160
        runs.append(
            {
                "path": f"/runs/run-{r}",
                "name": f"run-{r}",
                "state": "running",
                "pid": 5000 + r,
                "step": step,
                "max_steps": 159,
                "loss": 2.0,
                "eval_loss": 3.17,
                "losses": [[s, 3.5 - s / 100] for s in range(1, step + 1)],
                "eval_losses": [[s, 3.2 - s / 10000] for s in range(25, step + 1, 25)],
                "seconds_per_step": 18.7,
                "eta_seconds": 1000.0,
                "last_update": t,
            }
        )
    schedules = [
        {
            "id": f"cron-{i}-{k}",
            "kind": "crontab",
            "user": "op",
            "spec": "37 * * * *",
            "command": f"/home/op/bin/job-{k}.sh",
            "source": "crontab",
        }
        for k in range(10)
    ]
    seats = [
        {
            "kind": "vllm",
            "port": 8000 + k,
            "model": "Qwen3-4B",
            "pid": 1000 * i + k,
            "pids": [1000 * i + k],
            "flags": {"--gpu-memory-utilization": "0.38"},
            "restarts": 0,
            "oom_killed": False,
        }
        for k in range(2)
    ]
    return {
        "memory": {"total_bytes": 2**37, "used_bytes": 2**36},
        "load1": 0.4,
        "gpus": gpus,
        "disks": disks,
        "runs": runs,
        "schedules": schedules,
        "seats": seats,
        "gpu_source": "nvml",
        "warnings": [],
    }


def baseline_poll(raw: list[bytes], t: float) -> FleetSnapshot:
    """The controller's share of one poll: answers decoded, stray decided."""
    hosts = [host_from_probe(f"gpu-{i:03d}", json.loads(b), 40.0, t) for i, b in enumerate(raw)]
    return FleetSnapshot(hosts=tuple(mark_stray(hosts, Acks())), time=t)


def cycle_cost(n_hosts: int, polls: int, db: Path) -> dict:
    rng = random.Random(4919)
    t0 = 1_800_000_000.0
    answers = [
        [json.dumps(host_answer(i, t0 + 5 * p, rng)).encode() for i in range(n_hosts)]
        for p in range(polls + 5)
    ]
    engine, hist = AlertEngine(), History(db)
    base, judge, write = [], [], []
    for p, raw in enumerate(answers):
        t = t0 + 5 * p
        a = time.perf_counter()
        snap = baseline_poll(raw, t)
        b = time.perf_counter()
        engine.evaluate(snap)
        c = time.perf_counter()
        hist.record(snap)
        d = time.perf_counter()
        if p >= 5:
            base.append(b - a)
            judge.append(c - b)
            write.append(d - c)
    hist.close()
    added = [j + w for j, w in zip(judge, write, strict=True)]

    def ms(xs: list[float], f=statistics.median) -> float:
        return round(1000 * f(xs), 2)

    return {
        "hosts": n_hosts,
        "polls": polls,
        "baseline_ms": ms(base),
        "alerts_history_ms": ms(added),
        "alerts_history_mean_ms": ms(added, statistics.mean),
        "alerts_ms": ms(judge),
        "history_ms": ms(write),
        "history_mean_ms": ms(write, statistics.mean),
        "history_max_ms": ms(write, max),
        "ratio": round(statistics.median(added) / statistics.median(base), 3),
        "ratio_mean": round(statistics.mean(added) / statistics.mean(base), 3),
    }


def week_size(n_hosts: int, days: float, interval: float, db: Path) -> dict:
    rng = random.Random(4919)
    t0 = 1_800_000_000.0
    template = baseline_poll(
        [json.dumps(host_answer(i, t0, rng)).encode() for i in range(n_hosts)], t0
    )
    hist = History(db, retention_days=14)
    n = int(days * 86400 / interval)
    # GPU and run figures cycle through 64 variants (building every host from scratch each
    # poll took longer than writing it); disk use grows every poll
    variants = []
    for v in range(64):
        hosts = []
        for h in template.hosts:
            gpus = tuple(
                replace(
                    g,
                    memory_used_mib=g.memory_used_mib + rng.randint(-64, 64),
                    utilization_pct=rng.randint(0, 100),
                )
                for g in h.gpus
            )
            runs = tuple(replace(r, step=v % 160, loss=3.5 - v / 100) for r in h.runs)
            hosts.append(replace(h, gpus=gpus, runs=runs))
        variants.append(hosts)
    started = time.perf_counter()
    for p in range(n):
        t = t0 + p * interval
        hosts = tuple(
            replace(
                h,
                time=t,
                disks=tuple(replace(d, used_bytes=d.used_bytes + p * 4096) for d in h.disks),
            )
            for h in variants[p % 64]
        )
        hist.record(FleetSnapshot(hosts=hosts, time=t))
    hist.maintain(t0 + n * interval)
    hist.close()
    import sqlite3

    def on_disk() -> int:
        return sum(f.stat().st_size for f in db.parent.glob(db.name + "*"))

    size = on_disk()
    with sqlite3.connect(db) as c:
        raw = c.execute("SELECT count(*) FROM samples").fetchone()[0]
        folded = c.execute("SELECT count(*) FROM samples_10m").fetchone()[0]
    with sqlite3.connect(db, isolation_level=None) as c:
        c.execute("VACUUM")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {
        "hosts": n_hosts,
        "days": days,
        "interval_s": interval,
        "polls": n,
        "raw_rows": raw,
        "ten_minute_rows": folded,
        "size_mib": round(size / 2**20, 1),
        "size_after_vacuum_mib": round(on_disk() / 2**20, 1),
        "seconds_to_simulate": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--polls", type=int, default=100)
    ap.add_argument("--size", action="store_true", help="also simulate the history of --days")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = {"cycle": cycle_cost(args.hosts, args.polls, Path(d) / "cycle.sqlite3")}
        if args.size:
            out["week"] = week_size(args.hosts, args.days, args.interval, Path(d) / "week.sqlite3")
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    c = out["cycle"]
    print(
        f"{c['hosts']} hosts, {c['polls']} polls: baseline poll (decode + stray) median {c['baseline_ms']} ms; "
        f"alerts + history add median {c['alerts_history_ms']} ms (ratio {c['ratio']}), mean "
        f"{c['alerts_history_mean_ms']} ms (ratio {c['ratio_mean']}); alerts {c['alerts_ms']} ms, history "
        f"median {c['history_ms']} / mean {c['history_mean_ms']} / max {c['history_max_ms']} ms "
        "(the minute's rows are written once a minute)"
    )
    if "week" in out:
        w = out["week"]
        print(
            f"history for {w['days']:g} days of {w['interval_s']:g} s polls of {w['hosts']} hosts "
            f"({w['polls']} polls): {w['size_mib']} MiB on disk, {w['size_after_vacuum_mib']} MiB after VACUUM "
            f"({w['raw_rows']} minute rows, {w['ten_minute_rows']} ten-minute rows), simulated in {w['seconds_to_simulate']} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
