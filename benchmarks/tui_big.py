"""A big fleet in the dashboard: 200 hosts x 8 GPUs, 10,000 schedules and 3,000 runs.

    python benchmarks/tui_big.py [--hosts 200] [--schedules 10000] [--runs 3000] [--repeat 15]

Runs the real dashboard headless at 200x60 on synthetic polls (every GPU's memory moves) and
times, each as wall time until the next frame is on screen (`pilot.pause()` after the action) and
as the process CPU time spent meanwhile (`cpu` lines: what the app itself costs, without the
pilot's idle waits or a loaded machine's other processes):
  key press:   `j` in the focused table (the cursor moves one row)
  view switch: 1 -> 3 (Schedules), 3 -> 2 (Runs), 2 -> 1 (Fleet)
  repaint:     a new poll applied to the view on screen (Fleet, Schedules, Runs)
  idle:        IDLE_S after the first poll, once, before the actions (the views built ahead)
with SETTLE_S untimed after each (so work an action defers, such as the log the Runs view reads
once its cursor rests, is not counted in the next action), and prints p50 and p90 of each, in
milliseconds, beside the goals (key 50 ms, switch 150 ms,
repaint one 16.7 ms frame at p90). The baseline named in each line is the same action on a
small fleet (4 hosts, 40 schedules, 12 runs) in the same process: the ratio says what the
fleet's size costs. `--calls` counts the Python function calls each action makes instead
(cProfile; no times): the work itself, which a busy machine does not move, so two builds can be
compared on it (`PYTHONPATH` pointing at an export of the other build's tree as `fleetdeck`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import random
import statistics
import time

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import (
    Disk,
    FleetSnapshot,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Run,
    Schedule,
)
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource

G = 1024**3
#: untimed pause after each timed action (longer than the Runs view's LOG_REST_S)
SETTLE_S = 0.5
#: the idle time after the first poll, timed as its own line: the app builds the views it
#: builds ahead of their first switch then (tui/navigation.py, AHEAD), one every AHEAD_GAP_S
IDLE_S = 3.0


def snapshot(n_hosts: int, n_sched: int, n_runs: int, i: int, rng: random.Random) -> FleetSnapshot:
    hosts = []
    per_s, per_r = max(1, n_sched // n_hosts), max(1, n_runs // n_hosts)
    for h in range(n_hosts):
        name = f"gpu-{h:03d}"
        gpus = tuple(
            Gpu(
                index=g,
                name="NVIDIA H200",
                uuid=f"{name}-{g}",
                unified_memory=False,
                memory_total_mib=143771,
                memory_used_mib=rng.uniform(0, 143771),
                utilization_pct=rng.uniform(0, 100),
                processes=(GpuProcess(1000 + g, "ops", 1000.0, "python train.py"),),
            )
            for g in range(8)
        )
        disks = (Disk("~/runs", "/", "ext4", 2000 * G, int(rng.uniform(0.2, 0.9) * 2000 * G), 0),)
        runs = tuple(
            Run(
                host=name,
                path=f"/runs/run-{h}-{k}",
                name=f"run-{h}-{k}",
                state="running" if k == 0 else "finished",
                step=i + k,
                max_steps=159,
                loss=2.0 - k / 100,
                losses=tuple((s, 3.0 - s / 100) for s in range(0, 150, 5)),
            )
            for k in range(per_r)
        )
        scheds = tuple(
            Schedule(
                id=f"c-{h:03d}{k:05d}" + "0" * 20,
                host=name,
                kind="crontab",
                user="ops",
                spec="*/5 * * * *",
                command=f"/usr/local/bin/job-{k % 97} --flag {k}",
                source="crontab",
                reasons=("unacknowledged",) if k % 3 else (),
                stray=bool(k % 3),
            )
            for k in range(per_s)
        )
        hosts.append(
            HostSnapshot(
                name=name,
                reachable=True,
                latency_ms=rng.uniform(5, 80),
                gpus=gpus,
                disks=disks,
                runs=runs,
                schedules=scheds,
                time=1000.0 + i,
            )
        )
    return FleetSnapshot(hosts=tuple(hosts), time=1000.0 + i)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def measure(
    n_hosts: int, n_sched: int, n_runs: int, repeat: int, calls: bool = False
) -> dict[str, list[float]]:
    rng = random.Random(4919)
    snaps = [snapshot(n_hosts, n_sched, n_runs, i, rng) for i in range(repeat + 2)]
    fleet = parse_fleet(
        "".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(n_hosts)), "bench"
    )
    app = FleetdeckApp(fleet, RecordedSource(snaps[:1]), autopoll=False, clock=lambda: 1000.0)
    out: dict[str, list[float]] = {}

    async def timed(key: str, action) -> None:
        if calls:
            prof = cProfile.Profile()
            prof.enable()
            await action()
            await pilot.pause()
            prof.disable()
            out.setdefault(key, []).append(pstats.Stats(prof, stream=io.StringIO()).total_calls)
            await pilot.pause(SETTLE_S)
            return
        t0, c0 = time.perf_counter(), time.process_time()
        await action()
        await pilot.pause()
        out.setdefault(key, []).append((time.perf_counter() - t0) * 1000)
        out.setdefault("cpu " + key, []).append((time.process_time() - c0) * 1000)
        # work an action leaves for later (the Runs view reads a run's log once the cursor has
        # rested on it for LOG_REST_S) runs here, untimed, not inside the next action's window
        await pilot.pause(SETTLE_S)

    async with app.run_test(size=(200, 60)) as pilot:
        app.post_message(FleetPolled(snaps[0]))
        await pilot.pause()
        # the operator reads the first frame: what the app does meanwhile is counted here, not
        # in the first action after it
        await timed("idle after 1st poll", lambda: pilot.pause(IDLE_S))
        for i in range(repeat):
            snap = snaps[1 + i % (len(snaps) - 1)]
            for view, key in (("1", "fleet"), ("3", "schedules"), ("2", "runs")):
                await timed(f"switch to {key}", lambda v=view: pilot.press(v))
                await timed(f"key j ({key})", lambda: pilot.press("j"))

                async def poll(s=snap) -> None:
                    app.post_message(FleetPolled(s))

                await timed(f"repaint ({key})", poll)
    return out


async def main(args: argparse.Namespace) -> None:
    if args.calls:
        # Python function calls per action (cProfile): the work itself, the same on a busy or a
        # quiet machine, where the times above move by half between runs
        small = await measure(4, 40, 12, args.repeat, calls=True)
        big = await measure(args.hosts, args.schedules, args.runs, args.repeat, calls=True)
        print(
            f"fleet: {args.hosts} hosts x 8 GPUs, {args.schedules} schedules, {args.runs} runs; "
            f"baseline: 4 hosts, 40 schedules, 12 runs; {args.repeat} repeats; Python function calls"
        )
        print(f"{'action':<24}{'median':>9}{'max':>9}{'baseline median':>17}{'ratio':>8}")
        for key in big:
            b50, s50 = statistics.median(big[key]), statistics.median(small[key])
            print(f"{key:<24}{b50:>9.0f}{max(big[key]):>9.0f}{s50:>17.0f}{b50 / s50:>7.1f}x")
        return
    small = await measure(4, 40, 12, args.repeat)
    big = await measure(args.hosts, args.schedules, args.runs, args.repeat)
    goals = {
        "idle": 0.0,
        "key": 50.0,
        "switch": 150.0,
        "repaint": 16.7,
        "cpu key": 50.0,
        "cpu switch": 150.0,
        "cpu repaint": 16.7,
    }
    print(
        f"fleet: {args.hosts} hosts x 8 GPUs, {args.schedules} schedules, {args.runs} runs; "
        f"baseline: 4 hosts, 40 schedules, 12 runs; {args.repeat} repeats; ms"
    )
    print(f"{'action':<24}{'p50':>9}{'p90':>9}{'goal':>8}{'baseline p50':>14}{'ratio':>8}")
    for key in big:
        goal = next((v for k, v in goals.items() if key.startswith(k)), 0.0)
        b50, b90, s50 = pct(big[key], 0.5), pct(big[key], 0.9), statistics.median(small[key])
        print(f"{key:<24}{b50:>9.1f}{b90:>9.1f}{goal:>8.1f}{s50:>14.1f}{b50 / s50:>7.1f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--schedules", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument(
        "--calls",
        action="store_true",
        help="count Python function calls per action instead of timing (load-independent)",
    )
    asyncio.run(main(ap.parse_args()))
