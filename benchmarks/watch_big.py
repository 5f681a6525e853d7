"""`watch` over a big fleet: the monitor's CPU per host-poll at 100, 300 and 1,000 hosts, and
what share of a core a 5 s poll of them takes.

No sshd here: each host is an in-process stand-in for its resident probe that replays answers
recorded from the real probe on this machine (one-shot, as a host runs it, --record answers a
quarter of a second apart over a runs folder whose run advances a step each time, so processes'
CPU, the run's step, loss and age change from one answer to the next as on a live host). Each
host starts at its own place in the recording. The poller gets the stand-ins through its seam
for where a host's probe comes from (`Poller(fleet, open_probe=...)`, `fleet/probe_seam.py`).
The hosts share one recording, read only (a copy a host made the process hold 12 answers a
host that no controller holds, and Python's full garbage collections walk them: at 1,000 hosts
one took about half a second). The stand-in answers through the probe's own
numbering and deltas (`backend/host/probe/delta.py`: only the sections that changed travel,
whole every 30th), so everything the controller does per host-poll runs as in `watch`:
`Poller.poll()` (the deltas applied, the changed sections validated, the snapshots made, the
stray verdict) and `Monitor.observe()` (the alert rules, the history written to SQLite, the
outbox). What it leaves out is the transport (asyncssh's packets and the event loop's reading
of them; `benchmarks/profile_poll.py` measures those over real sshd hosts) and the seat checks.

For each size: --polls cycles after --warmup, process CPU per cycle (median; the least cycle's,
which a busy machine's other processes inflate least; the mean, with every full garbage
collection the cycles made, whose count and CPU are printed too), per host-poll,
and the share of a core at a --interval s poll (the cycle's CPU over the interval). The baseline
is the smallest size: the line for each larger size prints its cost per host-poll as a ratio to
it (flat is 1.0x).

    python benchmarks/watch_big.py --sizes 100,300,1000 --polls 10
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fleetdeck.backend.fleet.config import HostConfig, parse_fleet  # noqa: E402
from fleetdeck.backend.fleet.poller import Poller  # noqa: E402
from fleetdeck.backend.host.probe.delta import Answers  # noqa: E402

from support.probe import probe  # noqa: E402


class ReplayProbe:
    """A resident probe that replays recorded whole answers in turn, numbered and cut into
    deltas by the probe's own `Answers`, as the real one does for the request it is sent."""

    def __init__(self, answers: list[dict], start: int) -> None:
        self.answers, self.i, self.framer = answers, start, Answers()
        self.request: dict = {}

    async def send_json(self, request: dict) -> None:
        self.request = request

    async def recv_json(self) -> dict:
        whole = self.answers[self.i % len(self.answers)]
        self.i += 1
        held = self.request.get("held")
        return self.framer.framed(whole, held, fresh=bool(self.request.get("fresh")))

    async def read_stderr(self) -> str:
        return ""

    def close(self) -> None:
        pass

    async def wait(self, timeout: float | None = None) -> int | None:
        return None


def record(n: int, folder: Path) -> list[dict]:
    """`n` whole answers of the real probe on this machine, a quarter of a second apart, while a
    run in `folder` advances one step an answer."""
    run = folder / "runs" / "run-1"
    run.mkdir(parents=True)
    log = run / "progress.jsonl"
    req = {"op": "snapshot", "runs": [str(folder / "runs")], "disk_paths": [str(folder)]}
    out = []
    for step in range(1, n + 1):
        with log.open("a") as f:
            f.write(json.dumps({"step": step, "max_steps": 1000, "loss": 2 / step}) + "\n")
        ans = probe(req)
        for k in ("seq", "base", "same"):
            ans.pop(k, None)
        out.append(ans)
        time.sleep(0.25)
    return out


def fleet_text(n: int, runs: str) -> str:
    lines = ["[defaults]", "poll_interval = 5", f'runs = ["{runs}"]', ""]
    for i in range(n):
        lines += [f"[hosts.h{i:04d}]", 'address = "127.0.0.1"', ""]
    return "\n".join(lines)


async def measure(n: int, answers: list[dict], runs: str, polls: int, warmup: int) -> dict:
    # deferred: the monitor (its history and outbox read XDG_STATE_HOME, set per size below)
    from fleetdeck.backend.monitor.service import Monitor

    fleet = parse_fleet(fleet_text(n, runs), f"<{n} hosts>")
    place = {h.name: i for i, h in enumerate(fleet.hosts)}

    async def open_probe(host: HostConfig) -> ReplayProbe:
        # the poller's own seam: each host's probe is a replay, started at the host's place;
        # the hosts share the recording (read, never changed: checked at the end), so the
        # process holds what a controller holds, not twelve answers a host besides
        return ReplayProbe(answers, place[host.name])

    poller = Poller(fleet, open_probe=open_probe)
    monitor = Monitor(fleet, source=poller)
    cpu: list[float] = []
    recorded = json.dumps(answers)
    full: list[float] = []  # the CPU of each full garbage collection in the measured cycles
    started = [0.0]

    def collected(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.process_time()
            else:
                full.append(time.process_time() - started[0])

    gc.callbacks.append(collected)
    try:
        for k in range(warmup + polls):
            if k == warmup:
                full.clear()
            c0 = time.process_time()
            snap = await poller.poll()
            await monitor.observe(snap, seats=False)
            if k >= warmup:
                cpu.append(time.process_time() - c0)
        answered = sum(h.reachable for h in snap.hosts)
    finally:
        gc.callbacks.remove(collected)
        await monitor.close()
    if json.dumps(answers) != recorded:
        raise SystemExit("the controller changed an answer it was given: the replay is not valid")
    cycle = statistics.median(cpu)
    return {
        "hosts": n,
        "answered": answered,
        "cycle_cpu_ms": round(cycle * 1000, 1),
        "per_host_poll_ms": round(cycle * 1000 / n, 4),
        # the least a cycle took: what a busy machine's other processes added to it least
        "per_host_poll_min_ms": round(min(cpu) * 1000 / n, 4),
        # the measured cycles' CPU a host-poll, all of it (the mean): full collections included
        "per_host_poll_mean_ms": round(statistics.mean(cpu) * 1000 / n, 4),
        "full_collections": len(full),
        "full_collections_ms": round(sum(full) * 1000, 1),
        "cycle_cpu_ms_all": [round(c * 1000, 1) for c in cpu],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,300,1000", help="fleet sizes, smallest first")
    ap.add_argument("--polls", type=int, default=10, help="cycles measured per size")
    ap.add_argument("--warmup", type=int, default=3, help="cycles left out first (whole answers)")
    ap.add_argument("--interval", type=float, default=5.0, help="the poll interval judged")
    ap.add_argument("--record", type=int, default=12, help="answers recorded from the probe")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory() as d:
        answers = record(a.record, Path(d) / "host")
        size = statistics.median(len(json.dumps(x)) for x in answers)
        print(f"{len(answers)} answers recorded from this machine's probe, {size:.0f} bytes each")
        rows = []
        for n in sizes:
            os.environ["XDG_STATE_HOME"] = str(Path(d) / f"state-{n}")
            rows.append(
                asyncio.run(measure(n, answers, str(Path(d) / "host" / "runs"), a.polls, a.warmup))
            )
    base, least = rows[0]["per_host_poll_ms"], rows[0]["per_host_poll_min_ms"]
    print(f"{'hosts':>6} {'answered':>8} {'cycle ms CPU':>13} {'ms a host-poll':>15} "
          f"{'vs ' + str(sizes[0]):>8} {'% of a core at ' + format(a.interval, 'g') + ' s':>18} "
          f"{'least ms a host-poll':>21} {'vs ' + str(sizes[0]):>8} {'mean':>7} "
          f"{'full GCs (ms)':>14}")  # fmt: skip
    for r in rows:
        r["core_pct"] = round(100 * r["cycle_cpu_ms"] / 1000 / a.interval, 2)
        r["ratio"] = round(r["per_host_poll_ms"] / base, 2)
        r["min_ratio"] = round(r["per_host_poll_min_ms"] / least, 2)
        print(
            f"{r['hosts']:>6} {r['answered']:>8} {r['cycle_cpu_ms']:>13.1f} "
            f"{r['per_host_poll_ms']:>15.4f} {r['ratio']:>7.2f}x {r['core_pct']:>17.2f}% "
            f"{r['per_host_poll_min_ms']:>21.4f} {r['min_ratio']:>7.2f}x "
            f"{r['per_host_poll_mean_ms']:>7.4f} "
            f"{str(r['full_collections']) + ' (' + format(r['full_collections_ms'], 'g') + ')':>14}"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"sizes": rows, "interval": a.interval}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
