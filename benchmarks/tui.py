"""Applying one poll of 50 hosts x 8 GPUs to the fleet view: in place vs rebuilding the table.

    python benchmarks/tui.py [--hosts 50] [--gpus 8] [--polls 30]

Runs the real dashboard headless at 200x60, feeds synthetic polls (every GPU's memory moves,
one host in five goes down and comes back), and times, per poll:
  in place: FleetState.apply + the Fleet view's refresh (cells compared, changed ones updated)
  rebuild:  FleetState.apply + clearing the table and adding every row again (the baseline)
each as the synchronous step alone, as step + painting the table's visible 200x60 region
(`render_lines`, what the compositor asks the table for), and as step + whatever the event
loop does until the next frame is on screen (`pilot.pause()`, includes Textual's own work).
Prints medians and the ratio rebuild / in place. A frame at 60 Hz is 16.7 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from textual.geometry import Region

from fleetdeck.backend.config import parse_fleet
from fleetdeck.backend.models import Disk, FleetSnapshot, Gpu, GpuProcess, HostSnapshot, Run
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.screens.base import RecordedSource
from fleetdeck.tui.screens.fleet import host_cells
from fleetdeck.tui.widgets.keyed_table import KeyedTable

G = 1024 ** 3


def snapshot(n_hosts: int, n_gpus: int, i: int, rng: random.Random) -> FleetSnapshot:
    """Poll number `i` of a synthetic fleet."""
    hosts = []
    for h in range(n_hosts):
        name = f"gpu-{h:03d}"
        if h % 5 == 0 and i % 4 == 3:
            hosts.append(HostSnapshot(name=name, reachable=False, error="connect timed out after 5s",
                                      time=1000.0 + i))
            continue
        gpus = tuple(Gpu(index=g, name="NVIDIA H200", uuid=f"{name}-{g}", unified_memory=False,
                         memory_total_mib=143771, memory_used_mib=rng.uniform(0, 143771),
                         utilization_pct=rng.uniform(0, 100),
                         processes=(GpuProcess(1000 + g, "ops", 1000.0, "python train.py"),))
                     for g in range(n_gpus))
        disks = (Disk("~/runs", "/", "ext4", 2000 * G, int(rng.uniform(0.2, 0.9) * 2000 * G), 0),
                 Disk("/tank", "/tank", "zfs", 8000 * G, int(rng.uniform(0.2, 0.9) * 8000 * G), 0))
        runs = (Run(host=name, path=f"/runs/run-{h}", name=f"run-{h}", state="running", step=i, max_steps=159),)
        hosts.append(HostSnapshot(name=name, reachable=True, latency_ms=rng.uniform(5, 80), gpus=gpus,
                                  disks=disks, runs=runs, time=1000.0 + i))
    return FleetSnapshot(hosts=tuple(hosts), time=1000.0 + i)


def rebuild(screen, table: KeyedTable) -> None:
    """The baseline: clear the table and add every row again."""
    table.clear()
    table._cells.clear()
    table._heights.clear()
    for name in screen.state.host_names:
        cells, height = host_cells(screen.state, name, screen._widths)
        table.add_row(*cells, key=name, height=height)
        table._cells[name], table._heights[name] = tuple(cells), height  # keep sync() consistent


async def main(n_hosts: int, n_gpus: int, polls: int) -> None:
    """Measure and print the medians and the ratio."""
    rng = random.Random(4919)
    snaps = [snapshot(n_hosts, n_gpus, i, rng) for i in range(polls + 1)]
    fleet = parse_fleet("".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(n_hosts)), "bench")
    app = FleetdeckApp(fleet, RecordedSource(snaps[:1]), autopoll=False, clock=lambda: 1000.0 + polls)
    results: dict[str, list[float]] = {k: [] for k in (
        "in place", "rebuild", "in place + paint", "rebuild + paint", "in place + frame", "rebuild + frame")}
    async with app.run_test(size=(200, 60)) as pilot:
        app.poll_fleet()
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        table = screen.query_one("#fleet-table", KeyedTable)
        for i, snap in enumerate(snaps[1:]):
            for mode in ("in place", "rebuild"):
                t0 = time.perf_counter()
                with app.batch_update():
                    app.state.apply(snap)
                    if mode == "in place":
                        screen.refresh_view()
                    else:
                        rebuild(screen, table)
                t1 = time.perf_counter()
                if table._require_update_dimensions:
                    table._update_dimensions(table._new_rows)  # what the next idle does first
                table.render_lines(Region(0, 0, table.size.width, table.size.height))
                t2 = time.perf_counter()
                await pilot.pause()
                t3 = time.perf_counter()
                if i >= 3:  # warm-up polls
                    results[mode].append((t1 - t0) * 1000)
                    results[mode + " + paint"].append((t2 - t0) * 1000)
                    results[mode + " + frame"].append((t3 - t0) * 1000 - (t2 - t1) * 1000)
            if mode == "rebuild":  # put the keyed rows back for the next in-place round
                rebuild(screen, table)
                screen.refresh_view()
    print(f"{n_hosts} hosts x {n_gpus} GPUs, {len(results['in place'])} polls measured, 200x60 terminal")
    for k, v in results.items():
        print(f"  {k:<18} median {statistics.median(v):7.2f} ms   p90 {sorted(v)[int(len(v) * 0.9)]:7.2f} ms")
    ratio = statistics.median(results["rebuild"]) / statistics.median(results["in place"])
    ratio_p = statistics.median(results["rebuild + paint"]) / statistics.median(results["in place + paint"])
    print(f"  rebuild / in place: {ratio:.2f}x (apply step), {ratio_p:.2f}x (apply + paint)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--polls", type=int, default=30)
    a = ap.parse_args()
    asyncio.run(main(a.hosts, a.gpus, a.polls))
