"""Soak `fleetdeck watch` as a service: a loopback fleet of real sshd hosts going down and up,
one hostile host, one slow webhook, an accelerated poll, for `--minutes` (10 at least for the
record).

The fleet: `--hosts` plain hosts, each with a run whose eval loss rises (an `overfitting` alert
that fires at start); every `--flap` seconds one of them is taken down (its sshd and every
session killed) and brought back a little later, so `host-down` fires and resolves over and
over. One hostile host sends what a host can: a run folder whose name holds undecodable bytes
and an escape sequence, a progress log with NaN, infinities and a 5000-digit loss. The webhook
answers every POST slowly (its head comes after `--webhook-delay` s, under the 5 s deadline);
the command hook appends each delivery to a file. Half way through, `watch` is killed with
SIGKILL and started again, as `Restart=on-failure` would.

Measured from outside the process: RSS and open file descriptors (from /proc), CPU time per
poll (utime + stime over `fleetdeck_watch_polls` from its own /metrics), the longest gap
between two polls (from `fleetdeck_last_poll_timestamp_seconds`, scraped every 0.2 s), and
deliveries per transition: each transition's id (in the webhook body and the hook's
`{id}`) must arrive exactly once at each sink.

    python benchmarks/watch_soak.py --minutes 10 --json benchmarks/results/watch-soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.link.channel import loads
from fleetdeck.backend.fleet.models import (
    Disk,
    FleetSnapshot,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Run,
    Schedule,
)
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.monitor.delivery.outbox import COMPACT_FACTOR, COMPACT_MIN, Journal, Pending
from fleetdeck.backend.monitor.delivery.payloads import transition_id
from fleetdeck.backend.monitor.delivery.sink import Outcome
from fleetdeck.backend.monitor.history.store import History
from fleetdeck.backend.monitor.metrics.export import FleetCollector
from fleetdeck.backend.monitor.rules.alerts import KEEP_RESOLVED
from fleetdeck.backend.monitor.service import Monitor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.sshfleet import SshdFleet  # noqa: E402

HOOK = "import sys\nopen(sys.argv[1], 'a').write(sys.argv[2] + '\\t' + sys.argv[3] + '\\n')\n"


class SlowHook(BaseHTTPRequestHandler):
    """A webhook that takes its time over every answer; it records each id it acknowledged."""

    delay = 1.5
    got: list[str] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.delay)
        self.send_response(204)
        self.end_headers()
        with self.lock:
            SlowHook.got.append(body["id"])

    def log_message(self, *a) -> None:
        pass


def rising_evals(path: Path) -> None:
    lines = [
        {"step": s, "max_steps": 200, "loss": 3.0, "eval_loss": v, "time": time.time()}
        for s, v in ((25, 3.20), (50, 3.17), (75, 3.18), (100, 3.19))
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def hostile(root: Path) -> None:
    """What a hostile host can put in front of the probe."""
    bad = os.fsencode(str(root)) + b"/run-\xff\xfe\x1b[31mred\x07"
    os.makedirs(bad, exist_ok=True)
    lines = [
        b'{"step": 25, "max_steps": 200, "loss": NaN, "eval_loss": 3.2, "time": 1}',
        b'{"step": 50, "max_steps": 200, "loss": Infinity, "eval_loss": 3.3, "time": 2}',
        b'{"step": 75, "max_steps": 200, "loss": '
        + b"9" * 5000
        + b', "eval_loss": 3.4, "time": 3}',
        b'{"step": 100, "max_steps": 1e999, "loss": -Infinity, "eval_loss": 3.5, "time": 4}',
    ]
    with open(bad + b"/progress.jsonl", "wb") as f:
        f.write(b"\n".join(lines) + b"\n")


#: the hostile host's `python`: one start in four is the real interpreter, the others answer
#: whatever is asked with garbage bytes, one 4 MiB line, or JSON nested 100 000 levels deep
FAKE_PYTHON = """\
import os, sys, time
count = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "starts")
try:
    n = int(open(count).read() or 0)
except (OSError, ValueError):
    n = 1
open(count, "w").write(str(n + 1))
mode = n % 4
if mode == 0:
    os.execv(REAL, [REAL, *sys.argv[1:]])
answer = {1: b"\\xff\\xfe\\x1b[2J garbage {{{ not json \\x00\\n",
          2: b'{"gpus": "' + b"A" * (4 << 20) + b'"}\\n',
          3: b'{"gpus": ' + b"[" * 100000 + b"]" * 100000 + b"}\\n"}[mode]
out = sys.stdout.buffer
try:
    out.write(answer)
    out.flush()
    while sys.stdin.buffer.read(65536):
        out.write(answer)
        out.flush()
except (BrokenPipeError, OSError):
    pass
"""


def fake_python(where: Path) -> Path:
    """A `python` for the hostile host (see FAKE_PYTHON)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "python3"
    path.write_text(f"#!{sys.executable}\nREAL = {sys.executable!r}\n" + FAKE_PYTHON)
    path.chmod(0o755)
    return path


def state_figures(state: Path) -> dict[str, int]:
    """Sizes in bytes of the watch's state files, and the history's row counts."""
    d = state / "fleetdeck"
    out: dict[str, int] = {}
    for key, name in (
        ("alerts_json", "alerts.json"),
        ("outbox", "outbox.jsonl"),
        ("history_db", "history.sqlite3"),
        ("history_wal", "history.sqlite3-wal"),
    ):
        try:
            out[key] = (d / name).stat().st_size
        except OSError:
            out[key] = 0
    q = d / "quarantine"
    out["quarantine"] = (
        sum(p.stat().st_size for p in q.rglob("*") if p.is_file()) if q.exists() else 0
    )
    out["state_folder"] = (
        sum(p.stat().st_size for p in state.rglob("*") if p.is_file()) if state.exists() else 0
    )
    db = d / "history.sqlite3"
    if db.exists():
        import sqlite3

        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
            try:
                for t in ("samples", "samples_10m", "events", "series"):
                    out[f"rows_{t}"] = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            finally:
                con.close()
        except sqlite3.Error:
            pass
    return out


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (the standard library's); 0 for fewer than two."""
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return 0.0
    return statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope


#: what each sample measures, and how much growth after the warm-up still counts as flat over
#: the rest of the run: RSS 8 MiB, 2 descriptors, 64 KiB of alerts.json, 1 MiB of outbox (the
#: journal is compacted as it goes), the history's files and rows (bounded by design: minute rows
#: for raw_hours, ten-minute rows for the retention; flat only once both windows are full)
FLAT = {
    "rss": 8 << 20,
    "fds": 2,
    "alerts_json": 64 << 10,
    "outbox": 1 << 20,
    "quarantine": 0,
    "history_db": 4 << 20,
    "rows_samples": 2000,
    "rows_samples_10m": 500,
    "rows_events": 500,
}


def verdict(rows: list[dict], warmup: float, unit: float, unit_name: str) -> dict:
    """First `unit` of the run after `warmup` against the last `unit`, and the least-squares
    slope per `unit` of each figure over everything after `warmup`; flat when that slope over
    the span after the warm-up stays within FLAT."""
    if not rows:
        return {}
    end = rows[-1]["t"]
    after = [r for r in rows if r["t"] >= warmup] or rows[-1:]
    first = [r for r in after if r["t"] < after[0]["t"] + unit] or after[:1]
    last = [r for r in rows if r["t"] > end - unit] or rows[-1:]
    span = (end - after[0]["t"]) / unit
    out: dict = {
        "span": round(end / unit, 2),
        "unit": unit_name,
        "warmup": round(warmup / unit, 2),
        "figures": {},
    }
    flat = True
    for key, tol in FLAT.items():
        pts = [(r["t"] / unit, r[key]) for r in after if key in r]
        if not pts:
            continue
        k = slope(pts)
        ok = k * span <= tol
        flat = flat and ok
        out["figures"][key] = {
            "first": max(r.get(key, 0) for r in first),
            "last": max(r.get(key, 0) for r in last),
            "max": max(v for _, v in pts),
            f"slope_per_{unit_name}": round(k, 2),
            "flat": ok,
        }
    out["flat"] = flat
    return out


def print_verdict(v: dict) -> None:
    if not v:
        print("soak: no samples")
        return
    u = v["unit"]
    print(
        f"soak: {v['span']} {u}s; after the first {v['warmup']} {u}(s): first {u} (max) / last {u} (max) / "
        f"slope per {u} over the rest / flat"
    )
    for key, f in v["figures"].items():
        print(
            f"  {key:18} {f['first']:>12} {f['last']:>12} {f[f'slope_per_{u}']:>12} {'flat' if f['flat'] else 'GROWS'}"
        )
    print(
        f"soak: verdict: {'flat' if v['flat'] else 'NOT FLAT'} after the first {v['warmup']} {u}(s)",
        flush=True,
    )


def proc_figures(pid: int) -> tuple[int, int, float]:
    """(RSS bytes, open fds, CPU seconds) of `pid`."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    stat = Path(f"/proc/{pid}/stat").read_text()
    rest = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    return rss, fds, cpu


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    out = {}
    for name in ("fleetdeck_watch_polls", "fleetdeck_last_poll_timestamp_seconds"):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


class Watch:
    """One `fleetdeck watch` process and what it prints."""

    def __init__(self, fleet_file: Path, env: dict[str, str], interval: float, log: Path) -> None:
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetdeck.cli.main",
                "--hosts",
                str(fleet_file),
                "watch",
                "--interval",
                str(interval),
                "--prometheus",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline()
        m = re.search(r"metrics on (\S+)", line)
        if not m:
            raise SystemExit(f"watch did not start: {line!r}")
        self.url = m.group(1)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self.log.write(line)
            self.log.flush()


# -- the accelerated soak: the monitor in this process, days on a clock the soak drives ---------------
DAY = 86400.0


class SimClock:
    """The time the accelerated soak's monitor lives by: it moves only when the soak moves it."""

    def __init__(self, start: float) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now


#: what the hostile host answers that gets through the channel's strict JSON: undecodable bytes
#: (lone surrogates), escape sequences and NUL in every name, figures past a float (1e999 reads
#: as infinity), 400-digit counts, malformed items beside good ones, a 200-escape command
HOSTILE_ANSWER = (
    b'{"time": 1, "load1": 1e999, "memory": {"total_bytes": -5, "used_bytes": 1e999},'
    b' "gpus": [{"index": 0, "name": "\\udcff\\udcfe\\u001b[2J", "uuid": "GPU-\\u001b]0;owned\\u0007",'
    b' "unified_memory": false, "memory_total_mib": 1e999, "memory_used_mib": -1e999, "utilization_pct": 1e999,'
    b' "processes": [{"pid": -1, "user": "\\u0000", "used_mib": 1e308, "command": "\\u001b[31mred\\u0007"}]},'
    b' {"index": "1", "name": 7}],'
    b' "disks": [{"path": "~/runs\\n\\u001b[1m", "mount": "/\\udcff", "fstype": "ext4", "total_bytes": '
    + b"9"
    * 400
    + b', "used_bytes": 1, "free_bytes": -1}],'
    b' "runs": [{"path": "/root/runs/run-\\udcff\\udcfe\\u001b[31mred\\u0007", "name": "run-\\udcff\\u001b[31m",'
    b' "state": "running", "step": '
    + b"7"
    * 400
    + b', "max_steps": 1e999, "loss": 1e999, "eval_loss": -1e999,'
    b' "losses": [[1, 1e999], [2, -1e999], [3, 1e308], ["x", 1]], "eval_losses": [[25, 3.2], [50, 3.3], [75, 3.4]],'
    b' "reason": "loss is nan \\u001b[2J"}],'
    b' "schedules": [{"id": "loop-\\u001b", "kind": "loop", "user": "\\u0000", "spec": "", "command": "'
    + b"\\u001b[31m" * 200
    + b'", "source": "ps", "stray": true, "reasons": ["unacknowledged"]}]}'
)
#: and what it answers one poll in ten (each of them one in thirty), which the channel refuses (bad-answer): NaN,
#: nesting 100 000 levels deep, a 5000-digit number
HOSTILE_REFUSED = (
    b'{"gpus": [], "load1": NaN}',
    b'{"gpus": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    b'{"gpus": ' + b"9" * 5000 + b"}",
)


class SimFleet:
    """Snapshots of `n` plain hosts and one hostile host as functions of the time `t` (seconds
    since the start), so the same day always looks the same. Each plain host trains one run
    after another (`run_hours` each: one in three overfits, one in three goes NaN after a loss
    spike), its disk filling with the run and emptied after it (disk-full-eta), goes down for
    five minutes every three hours and blips for one poll now and then, has an idle holder on a
    card for 40 minutes every six hours and a stray cron line for two hours twice a day; the
    first host has a seat that restarts once a day. The hostile host answers HOSTILE_ANSWER
    through the probe's own checks, and one poll in ten an answer that is not JSON."""

    def __init__(self, n: int, run_hours: float, start: float) -> None:
        self.names = [f"h{i}" for i in range(1, n + 1)]
        self.run_s = run_hours * 3600
        self.start = start
        self.polls = 0
        self.runs_started: set[str] = set()

    def snapshot(self, now: float) -> FleetSnapshot:
        t = now - self.start
        self.polls += 1
        hosts = [self._plain(i, name, t, now) for i, name in enumerate(self.names)]
        hosts.append(self._hostile(t, now))
        return FleetSnapshot(hosts=tuple(hosts), time=now)

    def _plain(self, i: int, name: str, t: float, now: float) -> HostSnapshot:
        minute = t / 60 + i * 37
        if minute % 180 < 5 or (self.polls + i) % 97 == 0:
            return HostSnapshot(
                name=name,
                reachable=False,
                error="timeout: no answer within 2s",
                error_code="timeout",
                time=now,
            )
        shift = t + i * self.run_s / max(1, len(self.names))
        k, frac = int(shift // self.run_s), (shift % self.run_s) / self.run_s
        runs = [self._run(name, k, frac, now)]
        self.runs_started.add(f"{name}:{runs[0].path}")
        runs += [
            Run(
                host=name,
                path=f"/root/runs/run-{j}",
                name=f"run-{j}",
                state="finished",
                step=1000,
                max_steps=1000,
                adapter=f"/root/runs/run-{j}/adapter",
            )
            for j in range(max(0, k - 4), k)
        ]
        pid = 1000 + k
        hour = t / 3600 + i
        idle = hour % 6 < 40 / 60
        procs1 = (GpuProcess(pid, "ops", 30000.0, "fleetdeck train RUN.toml"),)
        if idle:
            procs1 += (GpuProcess(7777, "ops", 12000.0, "python notebook.py"),)
        gpus = (
            Gpu(
                0,
                "H200",
                "GPU-a",
                False,
                143771.0,
                60000.0 + 5000 * math.sin(t / 600),
                95.0,
                (GpuProcess(pid, "ops", 58000.0, "fleetdeck train RUN.toml"),),
            ),
            Gpu(1, "H200", "GPU-b", False, 143771.0, 42000.0, 0.0 if idle else 90.0, procs1),
        )
        total = 10**12
        used = int(3e11 + 5e11 * frac)
        disks = (Disk("~/runs", "/", "ext4", total, used, total - used),)
        scheds = [
            Schedule(
                id=f"cron-{name}-sys",
                host=name,
                kind="cron-file",
                user="root",
                spec="17 * * * *",
                command="run-parts /etc/cron.hourly",
                source="/etc/crontab",
                system=True,
            )
        ]
        if hour % 12 < 2:
            scheds.append(
                Schedule(
                    id=f"cron-{name}-37",
                    host=name,
                    kind="crontab",
                    user="ops",
                    spec="37 * * * *",
                    command="claude -p 'check on the run ... inform when ready'",
                    source="crontab",
                    stray=True,
                    reasons=("unacknowledged",),
                )
            )
        seats: tuple = ()
        if i == 0:
            seats = (
                Seat(
                    host=name,
                    kind="vllm",
                    port=8000,
                    model="qwen",
                    pid=4242,
                    restarts=int(t // DAY) + (1 if t % DAY >= 13 * 3600 else 0),
                    memory_by_gpu={0: 30000.0},
                ),
            )
        return HostSnapshot(
            name=name,
            reachable=True,
            latency_ms=40.0 + (t % 7),
            memory_total_bytes=2**39,
            memory_used_bytes=2**38,
            load1=3.0,
            gpus=gpus,
            disks=disks,
            runs=tuple(runs),
            schedules=tuple(scheds),
            time=now,
            seats=seats,
        )

    @staticmethod
    def _run(host: str, k: int, frac: float, now: float) -> Run:
        step = max(1, int(frac * 1000))
        kind = k % 3
        losses = tuple((s, 3.0 - s / 1000) for s in range(max(5, step - 100), step + 1, 5))
        evals = tuple(
            (s, 3.2 - s / 2000 + (max(0.0, s - 500) / 500 if kind == 1 else 0.0))
            for s in range(25, step + 1, 25)
        )
        reason = None
        if kind == 2 and frac > 0.6:
            losses = losses[:-1] + ((step, 30.0),)  # a spike, then NaN
            if frac > 0.7:
                reason, losses = f"loss is nan at step {step}", losses[:-1]
        return Run(
            host=host,
            path=f"/root/runs/run-{k}",
            name=f"run-{k}",
            state="running",
            pid=1000 + k,
            step=step,
            max_steps=1000,
            loss=losses[-1][1] if losses and not reason else None,
            eval_loss=evals[-1][1] if evals else None,
            losses=losses,
            eval_losses=evals,
            seconds_per_step=20.0,
            reason=reason,
            last_update=now,
        )

    def _hostile(self, t: float, now: float) -> HostSnapshot:
        k = self.polls % 30
        raw = HOSTILE_REFUSED[k // 10] if k % 10 == 7 else HOSTILE_ANSWER
        try:  # through the channel's own parse, as every answer
            answer = loads(raw, what="the probe's answer")
        except ValueError as e:
            return HostSnapshot(
                name="hostile",
                reachable=False,
                error=f"bad-answer: {str(e)[:200]}",
                error_code="bad-answer",
                time=now,
            )
        return host_from_probe("hostile", answer, 12.5, now)


class SimSource:
    """The monitor's poller: the fleet's snapshot at the clock's time."""

    def __init__(self, fleet: SimFleet, clock: SimClock) -> None:
        self.fleet, self.clock = fleet, clock

    async def poll(self) -> FleetSnapshot:
        return self.fleet.snapshot(self.clock())


class SimWebhook:
    """The webhook, as the deliverer sees it: down for the first hour of every day (each attempt
    fails, retried with the deliverer's backoff), otherwise answered; each id it acknowledged
    goes to `log`, one a line."""

    def __init__(self, clock: SimClock, start: float, log: Path) -> None:
        self.clock, self.start, self.log = clock, start, log

    async def __call__(self, *entries: Pending) -> Outcome:
        if (self.clock() - self.start) % DAY < 3600:
            return Outcome(False, "alert webhook http://127.0.0.1:9/hook did not answer within 5s")
        with open(self.log, "a") as f:  # on disk: the soak's own bookkeeping holds no memory
            f.write("".join(p.id + "\n" for p in entries))
        return Outcome(True)


class SimTime:
    """The `time` module as the monitor's delivery modules see it during the accelerated soak:
    `time()` is the soak's clock, everything else the real module."""

    def __init__(self, clock: SimClock) -> None:
        self._clock = clock

    def time(self) -> float:
        return self._clock()

    def __getattr__(self, name: str):
        return getattr(time, name)


#: the modules whose `time.time()` is the outbox's clock: when an entry is queued, retried, given
#: up, grouped or silenced (they take no clock of their own); the older trees' names after them
CLOCKED = ("delivery.deliver", "delivery.queue", "silences", "delivery.grouping")
CLOCKED += ("deliver", "delivery_queue", "grouping")


def use_clock(clock: SimClock) -> list[str]:
    """Give each of CLOCKED that this tree has the soak's clock; the names it was given to."""
    out = []
    for name in CLOCKED:
        try:
            mod = importlib.import_module(f"fleetdeck.backend.monitor.{name}")
        except ImportError:
            continue
        if getattr(mod, "time", None) is time:
            mod.time = SimTime(clock)  # type: ignore[attr-defined]
            out.append(name)
    return out


def self_figures() -> dict[str, int]:
    """This process: RSS, open descriptors, and Python's allocated blocks after a collection."""
    gc.collect()
    rss = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return {
        "rss": rss,
        "fds": len(os.listdir("/proc/self/fd")),
        "py_blocks": sys.getallocatedblocks(),
    }


def live_series(state: Path) -> int:
    """Series written in the last hour's minute rows (what the retention's bound is a multiple of)."""
    db = state / "fleetdeck" / "history.sqlite3"
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
        try:
            return con.execute(
                "SELECT count(DISTINCT sid) FROM samples WHERE t >= (SELECT max(t) FROM samples) - 3600"
            ).fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


#: how much a figure may still grow after its warm-up over the accelerated run and stay flat:
#: (absolute, share of its value at the start of the flat span). RSS and Python's blocks are the
#: process; alerts.json holds the firing alerts and at most KEEP_RESOLVED resolved ones; the outbox journal is compacted past
#: four records a live entry (256 at least, some 150 KiB); the history's rows and files are bounded by the
#: retention once it is full. `rows_series` is left out: a series row is kept for every run ever
#: seen (see the verdict's note)
ACCEL_FLAT = {
    "rss": (6 << 20, 0.0),
    "py_blocks": (20000, 0.0),
    "fds": (1, 0.0),
    "alerts_json": (32 << 10, 0.0),
    "alerts_firing": (10, 0.0),
    "outbox": (192 << 10, 0.0),
    "quarantine": (0, 0.0),
    "history_files": (256 << 10, 0.10),
    "rows_samples": (200, 0.03),
    "rows_samples_10m": (200, 0.03),
    "rows_events": (200, 0.10),
}
HISTORY_FIGURES = {"history_files", "rows_samples", "rows_samples_10m", "rows_events"}
#: figures held at every sample to a bound the design gives (`bound_<figure>` in each sample)
BOUNDED = ("rows_samples", "rows_samples_10m", "outbox_records", "alerts_resolved")


def accel_verdict(rows: list[dict], retention_days: float) -> dict:
    """Each figure after its warm-up (a day; the history's, the retention: until then its
    windows are still filling), the first day of that span against the last (their largest
    values) and the least-squares slope per day over all of it; flat when both the growth and
    the slope times the span stay within ACCEL_FLAT. Also, at every sample, each of BOUNDED
    within its bound: the history's rows within what the retention allows for the series it
    holds, the outbox journal's records within what its compaction allows, the resolved alerts
    alerts.json keeps within KEEP_RESOLVED."""
    end = rows[-1]["t"]
    out: dict = {"days": round(end / DAY, 2), "retention_days": retention_days, "figures": {}}
    flat = True
    for key, (tol_abs, tol_share) in ACCEL_FLAT.items():
        warm = max(1.0, retention_days) * DAY if key in HISTORY_FIGURES else DAY
        after = [r for r in rows if r["t"] >= warm and key in r]
        if end - warm < DAY / 2 or len(after) < 2:
            out["figures"][key] = {
                "flat": None,
                "why": "the run ends before a flat span of half a day",
            }
            continue
        window = min(DAY, (end - warm) / 2)
        first = max(r[key] for r in after if r["t"] < after[0]["t"] + window)
        last = max(r[key] for r in after if r["t"] > end - window)
        k = slope([(r["t"] / DAY, r[key]) for r in after])
        span = (end - after[0]["t"]) / DAY
        tol = tol_abs + tol_share * first
        ok = last - first <= tol and k * span <= tol
        flat = flat and ok
        out["figures"][key] = {
            "from_day": round(warm / DAY, 2),
            "first": first,
            "last": last,
            "max": max(r[key] for r in after),
            "slope_per_day": round(k, 1),
            "tolerance": int(tol),
            "flat": ok,
        }
    over = {key: next((r for r in rows if r[key] > r[f"bound_{key}"]), None) for key in BOUNDED}
    out["bounds"] = {
        key: {
            "max": max(r[key] for r in rows),
            "bound_at_max": max(rows, key=lambda r: r[key])[f"bound_{key}"],
            "held": r is None,
            "first_over": None
            if r is None
            else {"t": r["t"], key: r[key], "bound": r[f"bound_{key}"]},
        }
        for key, r in over.items()
    }
    series = [r for r in rows if r["t"] >= DAY]
    if len(series) >= 2:
        out["series_rows_per_day"] = round(
            slope([(r["t"] / DAY, r["rows_series"]) for r in series]), 1
        )
    out["flat"] = flat and all(b["held"] for b in out["bounds"].values())
    return out


def leaks(text: str) -> tuple[str, ...]:
    """`--leak`'s value: leak names, comma-separated."""
    out = tuple(x for x in text.split(",") if x)
    bad = [x for x in out if x not in ("history", "outbox", "memory")]
    if bad:
        raise argparse.ArgumentTypeError(f"not a leak: {', '.join(bad)} (history, outbox, memory)")
    return out


async def accelerated(args: argparse.Namespace) -> int:
    """The accelerated soak (see `--accelerated`); exit status 0 when flat, 1 when not."""
    base = Path(tempfile.mkdtemp(prefix="watch-accel-", dir="/var/tmp"))
    state = base / "state"
    os.environ.update(XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(base / "config"))
    os.environ.pop("FLEETDECK_HOSTS", None)
    hook_log = base / "hook.log"
    names = [f"h{i}" for i in range(1, args.hosts + 1)]
    # each transition's id, one a line (a delivery of several lists them in $FLEETDECK_IDS)
    hook = [
        "/bin/sh",
        "-c",
        'for i in ${FLEETDECK_IDS:-$1}; do printf "%s\\n" "$i"; done >> "$2"',
        "sh",
        "{id}",
        str(hook_log),
    ]
    fleet_text = "".join(
        f'[hosts.{n}]\naddress = "127.0.0.1"\n' for n in [*names, "hostile"]
    ) + "\n".join(
        [
            "[alerts]",
            f"history_retention_days = {args.retention_days}",
            f"on_alert = {json.dumps(hook)}",
            'webhook = "http://127.0.0.1:9/hook"',
            "",
        ]
    )
    (base / "hosts.toml").write_text(fleet_text)
    fleet = parse_fleet(fleet_text, str(base / "hosts.toml"))
    start = float(int(time.time()))
    clock = SimClock(start)
    clocked = use_clock(clock)
    sim = SimFleet(args.hosts, args.run_hours, start)
    webhook = SimWebhook(clock, start, base / "webhook.log")
    # what the soak keeps while it runs is counts and files, so that Python's allocated blocks
    # are the monitor's: transitions and warnings counted, ids and samples written out
    said = Counter()
    warned: Counter = Counter()
    queued_log = base / "queued.log"
    kept: list[FleetSnapshot] = []  # --leak memory
    if "history" in args.leak:
        History.maintain = lambda self, now=None: None  # type: ignore[method-assign]
    if "outbox" in args.leak:
        Journal.wants_compaction = lambda self, live: False  # type: ignore[method-assign]

    def report(kind: str, line: str) -> None:
        said[kind] += 1
        if kind != "transition" and len(warned) < 100:
            warned[re.sub(r"[0-9a-f]{24}|\d+", "#", line)] += 1

    def monitor() -> Monitor:
        m = Monitor(
            fleet,
            role="deliver",
            source=SimSource(sim, clock),
            collector=FleetCollector(),
            report=report,
        )
        d = m.deliverer
        assert d is not None
        real_send, real_group, real_enqueue = d.send, getattr(d, "send_group", None), d.enqueue

        async def send(p: Pending) -> Outcome:
            return await (webhook(p) if p.sink == "webhook" else real_send(p))

        async def send_group(group: list[Pending]) -> Outcome:  # a tree that groups deliveries
            return await (webhook(*group) if group[0].sink == "webhook" else real_group(group))

        def enqueue(alerts: list, now: float | None = None) -> None:
            with open(queued_log, "a") as f:
                f.write("".join(transition_id(a) + "\n" for a in alerts))
            real_enqueue(alerts, now)

        d.send = send  # type: ignore[method-assign]
        if real_group is not None:
            d.send_group = send_group  # type: ignore[attr-defined]
        d.enqueue = enqueue  # type: ignore[method-assign]
        return m

    mon = monitor()
    steps = int(args.days * DAY / args.interval)
    restart_at = steps // 2 if not args.no_restart else -1
    rows: list[str] = []  # each sample as its JSON line
    sample_every = max(1, int(3600 / args.interval))
    print(
        f"soak: accelerated, {args.hosts} hosts + 1 hostile, a poll every {args.interval:g} simulated s, "
        f"{args.days:g} simulated days, retention {args.retention_days:g} days, in {base}",
        flush=True,
    )
    t_real = time.monotonic()
    cpu0 = time.process_time()
    traced = None
    if args.tracemalloc:
        tracemalloc.start(8)
    for i in range(1, steps + 1):
        clock.now = start + i * args.interval
        snap = await mon.cycle()
        if "memory" in args.leak:
            kept.append(snap)
        assert mon.deliverer is not None
        await mon.deliverer.drain()
        # drain (what `watch --count` does) leaves the due heap as it is; `watch`'s own delivery
        # task (`run`) pops it as its records come due, stale ones included: done here as run does
        start_due = getattr(mon.deliverer, "_start_due", None)
        if start_due is not None:
            start_due(clock())
        if (
            i == restart_at
        ):  # as a restart of the service: state saved, everything closed, loaded again
            await mon.deliverer.drain()  # what _start_due began
            mon.save()
            if mon.journal is not None:
                mon.journal.close()
            await mon.close()
            mon = monitor()
        if i % sample_every == 0 or i == steps:
            files = state_figures(state)
            files["history_files"] = files["history_db"] + files["history_wal"]
            saved = json.loads((state / "fleetdeck" / "alerts.json").read_text() or "{}")
            files["alerts_firing"], files["alerts_resolved"] = (
                len(saved.get("firing", ())),
                len(saved.get("resolved", ())),
            )
            series = live_series(state)
            # a day of minute rows (and up to an hour and ten minutes more before the hourly fold);
            # ten-minute rows from the retention's start to a day ago (and two hours more); 10% slack
            # for series that come and go (a run between two, a host down)
            raw_rows = int(1.1 * series * 3600 / max(60.0, args.interval) * (24 + 70 / 60))
            rows_10m = int(1.1 * series * 6 * (24 * max(0.0, args.retention_days - 1) + 2))
            row = {
                "t": round(clock.now - start),
                **self_figures(),
                **files,
                "polls": i,
                "transitions": said["transition"],
                "warnings": said["warning"],
                "outbox_live": len(mon.deliverer.pending),
                "live_series": series,
                "bound_rows_samples": raw_rows,
                "bound_rows_samples_10m": rows_10m,
                "bound_alerts_resolved": KEEP_RESOLVED,
                "outbox_records": mon.journal.records if mon.journal else 0,
                # compaction comes after a delivery: the adds of a cycle may wait for one
                "bound_outbox_records": max(
                    COMPACT_MIN, COMPACT_FACTOR * len(mon.deliverer.pending)
                )
                + 64,
                "real_s": round(time.monotonic() - t_real, 1),
            }
            rows.append(json.dumps(row))
            if args.tracemalloc and traced is None and row["t"] >= DAY:
                traced = tracemalloc.take_snapshot()
            if args.samples:
                with open(args.samples, "a") as f:
                    f.write(json.dumps(row) + "\n")
            if row["t"] % DAY < args.interval * sample_every or i == steps:
                print(
                    f"soak: day {row['t'] / DAY:5.2f} rss {row['rss'] / 2**20:.1f} MiB blocks {row['py_blocks']} "
                    f"fds {row['fds']} transitions {row['transitions']} alerts.json {row['alerts_json']} "
                    f"outbox {row['outbox']} ({row['outbox_live']} live) history {row['history_files']} B rows "
                    f"{row['rows_samples']}+{row['rows_samples_10m']} events {row['rows_events']} series "
                    f"{row['rows_series']} ({row['real_s']}s)",
                    flush=True,
                )
    await mon.deliverer.drain()
    mon.save()
    if mon.journal is not None:
        mon.journal.close()
    await mon.close()
    if traced is not None:
        gc.collect()
        grown = tracemalloc.take_snapshot().compare_to(traced, "traceback")
        print("soak: where Python's allocations grew after the first simulated day (KiB, blocks):")
        for s in grown[:12]:
            frames = [
                f"{Path(f.filename).name}:{f.lineno}"
                for f in reversed(s.traceback)
                if "asyncio" not in f.filename
            ][:4]
            print(f"  {s.size_diff / 1024:+9.1f} {s.count_diff:+7d}  {' < '.join(frames)}")
    hook_ids = Counter(hook_log.read_text().split()) if hook_log.exists() else Counter()
    samples = [json.loads(r) for r in rows]
    queued = set(queued_log.read_text().split()) if queued_log.exists() else set()
    web_ids = Counter(webhook.log.read_text().split()) if webhook.log.exists() else Counter()
    pending = {p.id for p in mon.deliverer.pending.values()} if mon.deliverer is not None else set()
    fig = {
        "accelerated": True,
        "days": args.days,
        "interval_s": args.interval,
        "hosts": args.hosts + 1,
        "retention_days": args.retention_days,
        "polls": steps,
        "clocked": clocked,
        "leak": list(args.leak),
        "restarted": restart_at > 0,
        "transitions_printed": said["transition"],
        "warnings": said["warning"],
        "distinct_warnings": sorted(warned)[:20],
        "transition_ids_command": len(hook_ids),
        "transition_ids_webhook": len(web_ids),
        "deliveries_per_transition_command": sorted(set(hook_ids.values())),
        "deliveries_per_transition_webhook": sorted(set(web_ids.values())),
        "ids_only_one_sink": len(set(hook_ids) ^ set(web_ids)),
        "transition_ids_queued": len(queued),
        "pending_at_end": len(pending),
        "never_delivered_command": len(queued - set(hook_ids) - pending),
        "never_delivered_webhook": len(queued - set(web_ids) - pending),
        "runs_started": len(sim.runs_started),
        "real_s": round(time.monotonic() - t_real, 1),
        "cpu_ms_per_poll": round(1000 * (time.process_time() - cpu0) / steps, 2),
        "samples": samples,
    }
    fig["verdict"] = accel_verdict(samples, args.retention_days)
    print(json.dumps({k: v for k, v in fig.items() if k not in ("samples", "verdict")}, indent=1))
    print_accel_verdict(fig["verdict"])
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=1) + "\n")
    shutil.rmtree(base, ignore_errors=True)
    return 0 if fig["verdict"]["flat"] else 1


def print_accel_verdict(v: dict) -> None:
    print(
        f"soak: {v['days']} simulated days, retention {v['retention_days']:g} days: first day of the flat span "
        "(max) / last day (max) / slope per day / tolerance"
    )
    for key, f in v["figures"].items():
        if f["flat"] is None:
            print(f"  {key:18} {f['why']}")
            continue
        print(
            f"  {key:18} {f['first']:>12} {f['last']:>12} {f['slope_per_day']:>12} {f['tolerance']:>10} "
            f"{'flat' if f['flat'] else 'GROWS'} (from day {f['from_day']:g})"
        )
    for key, b in v["bounds"].items():
        print(
            f"  {key:18} at most {b['max']} (bound there {b['bound_at_max']}): "
            + (
                "within its bound at every sample"
                if b["held"]
                else f"PAST its bound: {b['first_over']}"
            )
        )
    if "series_rows_per_day" in v:
        print(
            f"  series rows (never dropped; one per run and figure ever seen): {v['series_rows_per_day']:+} a day"
        )
    print(f"soak: verdict: {'flat' if v['flat'] else 'NOT FLAT'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--hosts", type=int, default=4, help="plain hosts (plus one hostile host)")
    ap.add_argument(
        "--interval",
        type=float,
        help="seconds between polls (default 0.5; accelerated: 30 simulated seconds)",
    )
    ap.add_argument(
        "--flap", type=float, default=20.0, help="seconds between one host going down and the next"
    )
    ap.add_argument("--webhook-delay", type=float, default=1.5)
    ap.add_argument("--webhook-timeout", type=float, default=5.0)
    ap.add_argument(
        "--no-restart", action="store_true", help="do not kill and restart watch half way"
    )
    ap.add_argument("--sample-every", type=float, default=30.0, help="seconds between two samples")
    ap.add_argument("--samples", help="append each sample here as one JSON line, as it is taken")
    ap.add_argument("--json", help="write the figures here too")
    acc = ap.add_argument_group(
        "accelerated",
        "the monitor in this process on a clock the soak drives: "
        "synthetic snapshots, days in minutes",
    )
    acc.add_argument("--accelerated", action="store_true")
    acc.add_argument("--days", type=float, default=7.0, help="simulated days")
    acc.add_argument(
        "--retention-days", type=float, default=2.0, help="history_retention_days (1 at least)"
    )
    acc.add_argument(
        "--run-hours", type=float, default=8.0, help="simulated hours a training run lasts"
    )
    acc.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace Python's allocations and print where "
        "they grew from the end of the first simulated day to the end (slower)",
    )
    acc.add_argument(
        "--leak",
        type=leaks,
        default=(),
        help="deliberate leaks, to see the verdict catch them (comma-separated): history (no "
        "retention), outbox (no compaction), memory (every snapshot kept)",
    )
    args = ap.parse_args()
    if args.accelerated:
        args.interval = args.interval or 30.0
        raise SystemExit(asyncio.run(accelerated(args)))
    args.interval = args.interval or 0.5

    base = Path(tempfile.mkdtemp(prefix="watch-soak-", dir="/var/tmp"))
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(base / "state"),
        "XDG_CONFIG_HOME": str(base / "config"),
    }
    env.pop("FLEETDECK_HOSTS", None)
    fleet = SshdFleet(base / "fleet")
    names = [f"h{i}" for i in range(1, args.hosts + 1)]
    for n in [*names, "hostile"]:
        h = fleet.add(n)
        (h.runs / "run-1").mkdir(exist_ok=True)
        rising_evals(h.runs / "run-1" / "progress.jsonl")
    hostile(fleet.hosts["hostile"].runs)
    bad_python = fake_python(base / "hostile-bin")

    SlowHook.delay = args.webhook_delay
    web = ThreadingHTTPServer(("127.0.0.1", 0), SlowHook)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    hook, hook_log = base / "hook.py", base / "hook.log"
    hook.write_text(HOOK)
    fleet_file = base / "hosts.toml"
    fleet_file.write_text(
        fleet.fleet_toml(
            defaults={"connect_timeout": 2, "command_timeout": 5},
            per_host={"hostile": {"python": str(bad_python)}},
        )
        + "\n".join(
            [
                "[alerts]",
                "host_down_after = 2",
                # the disk-rate window keeps every sample of its span in memory (3600 a root at a 0.5 s
                # poll and the default 1800 s): a short one fills within the warm-up, so what RSS does
                # after it is the rest of the process
                "disk_rate_window = 60",
                "disk_rate_min_span = 30",
                # the loopback hosts are this one machine: its crontab and loops are not the soak's
                'disabled = ["new-stray"]',
                f"on_alert = {json.dumps([sys.executable, str(hook), str(hook_log), '{id}', '{state}'])}",
                f'webhook = "http://127.0.0.1:{web.server_address[1]}/hook"',
                f"webhook_timeout = {args.webhook_timeout}",
                "",
            ]
        )
    )

    print(
        f"soak: {args.hosts} hosts + 1 hostile, poll every {args.interval}s, {args.minutes} min, in {base}",
        flush=True,
    )
    watch = Watch(fleet_file, env, args.interval, base / "watch.log")
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    samples: list[tuple[float, int, int, float, float]] = []  # (t, rss, fds, cpu, polls)
    states: list[dict[str, int]] = []
    rows: list[dict] = []
    gaps: list[float] = []
    longest_at = 0.0
    last_poll: float | None = None
    down: tuple[str, float] | None = None
    next_flap = t0 + args.flap
    flaps = 0
    restarted = args.no_restart
    cpu_before_restart = polls_before_restart = 0.0
    next_sample = t0
    sample_file = open(args.samples, "a") if args.samples else None
    scrape_every = max(0.2, min(1.0, args.interval / 10))
    while time.monotonic() < end:
        now = time.monotonic()
        if down is None and now >= next_flap:
            victim = [*names, "hostile"][flaps % (len(names) + 1)]  # its helper starts again
            fleet.kill(victim)
            down = (victim, now + args.flap / 2)
            flaps += 1
        elif down is not None and now >= down[1]:
            fleet.start(down[0])
            down, next_flap = None, now + args.flap / 2
        if not restarted and now >= t0 + args.minutes * 30:
            _, _, cpu = proc_figures(watch.proc.pid)
            m = scrape(watch.url)
            cpu_before_restart += cpu
            polls_before_restart += m.get("fleetdeck_watch_polls", 0)
            watch.proc.send_signal(signal.SIGKILL)
            watch.proc.wait()
            old_lines = watch.lines
            watch = Watch(fleet_file, env, args.interval, base / "watch.log")
            watch.lines[:0] = old_lines
            restarted, last_poll = True, None
            print("soak: watch killed with SIGKILL and started again", flush=True)
        try:
            m = scrape(watch.url)
        except OSError:
            m = {}
        t = m.get("fleetdeck_last_poll_timestamp_seconds")
        if t is not None and t != last_poll:
            if last_poll is not None:
                gaps.append(t - last_poll)
                if gaps[-1] == max(gaps):
                    longest_at = now - t0
            last_poll = t
        if now >= next_sample:
            rss, fds, cpu = proc_figures(watch.proc.pid)
            samples.append(
                (
                    now - t0,
                    rss,
                    fds,
                    cpu + cpu_before_restart,
                    m.get("fleetdeck_watch_polls", 0) + polls_before_restart,
                )
            )
            files = state_figures(base / "state")
            states.append(files)
            n_trans = sum(1 for x in watch.lines if " ALERT " in x or " RESOLVED " in x)
            print(
                f"soak: {now - t0:6.0f}s rss {rss / 2**20:.1f} MiB fds {fds} polls "
                f"{samples[-1][4]:.0f} transitions {n_trans} alerts.json {files['alerts_json']} "
                f"outbox {files['outbox']} history {files['history_db'] + files['history_wal']} B "
                f"rows {files.get('rows_samples', 0)}+{files.get('rows_samples_10m', 0)}",
                flush=True,
            )
            rows.append(
                {
                    "t": round(now - t0, 1),
                    "wall": round(time.time()),
                    "rss": rss,
                    "fds": fds,
                    "cpu_s": round(samples[-1][3], 2),
                    "polls": samples[-1][4],
                    "transitions": n_trans,
                    **files,
                }
            )
            if sample_file is not None:
                sample_file.write(json.dumps(rows[-1]) + "\n")
                sample_file.flush()
            next_sample = now + args.sample_every
        time.sleep(scrape_every)
    if down is not None:
        fleet.start(down[0])
    time.sleep(args.webhook_delay + 6)  # the last deliveries land
    watch.proc.send_signal(signal.SIGTERM)
    t_stop = time.monotonic()
    rc = watch.proc.wait(30)
    stop_s = time.monotonic() - t_stop
    web.shutdown()
    fleet.stop_all()

    transitions = [x for x in watch.lines if re.match(r"\S+ (ALERT|RESOLVED) ", x)]
    hook_ids = (
        Counter(line.split("\t")[0] for line in hook_log.read_text().splitlines())
        if hook_log.exists()
        else Counter()
    )
    web_ids = Counter(SlowHook.got)
    warnings = [x for x in watch.lines if x.startswith("warning:")]
    tracebacks = (base / "watch.log").read_text(errors="replace").count("Traceback")
    after_warmup = [s for s in samples if s[0] >= 60] or samples
    cpu_polls = samples[-1][4] - after_warmup[0][4]
    fig = {
        "minutes": args.minutes,
        "hosts": args.hosts + 1,
        "interval_s": args.interval,
        "flaps": flaps,
        "polls": samples[-1][4],
        "rss_mib_first": round(after_warmup[0][1] / 2**20, 1),
        "rss_mib_last": round(samples[-1][1] / 2**20, 1),
        "rss_mib_max": round(max(s[1] for s in after_warmup) / 2**20, 1),
        "fds_first": after_warmup[0][2],
        "fds_last": samples[-1][2],
        "fds_max": max(s[2] for s in after_warmup),
        "cpu_ms_per_poll": round(1000 * (samples[-1][3] - after_warmup[0][3]) / cpu_polls, 2)
        if cpu_polls
        else None,
        "longest_gap_between_polls_s": round(max(gaps), 2) if gaps else None,
        "longest_gap_at_s": round(longest_at),
        "median_gap_s": round(sorted(gaps)[len(gaps) // 2], 2) if gaps else None,
        "transitions_printed": len(transitions),
        "transition_ids_command": len(hook_ids),
        "transition_ids_webhook": len(web_ids),
        "deliveries_per_transition_command": sorted(set(hook_ids.values())),
        "deliveries_per_transition_webhook": sorted(set(web_ids.values())),
        "ids_only_one_sink": len(set(hook_ids) ^ set(web_ids)),
        "warnings": len(warnings),
        "distinct_warnings": len({re.sub(r"[0-9a-f]{24}|\d+", "#", w) for w in warnings}),
        "tracebacks": tracebacks,
        "state_folder_kib": round(
            sum(p.stat().st_size for p in (base / "state").rglob("*") if p.is_file()) / 1024
        ),
        "restarted_with_sigkill": not args.no_restart,
        "sigterm_exit": rc,
        "sigterm_stop_s": round(stop_s, 2),
        "samples": [
            {"t": round(s[0]), "rss_mib": round(s[1] / 2**20, 1), "fds": s[2], "polls": s[4]}
            for s in samples
        ],
    }
    unit = min(3600.0, max(60.0, args.minutes * 60 / 4))
    fig["verdict"] = verdict(rows, unit, unit, "hour" if unit == 3600 else f"{unit:.0f}s")
    print(json.dumps({k: v for k, v in fig.items() if k not in ("samples", "verdict")}, indent=1))
    print_verdict(fig["verdict"])
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=1) + "\n")


if __name__ == "__main__":
    main()
