"""Applying one poll of 50 hosts x 8 GPUs to the fleet view: in place vs rebuilding the table,
and Textual's DataTable (the baseline) vs textual-fastdatatable.

    python benchmarks/tui.py [--hosts 50] [--gpus 8] [--polls 30]

Runs the real dashboard headless at 200x60, feeds synthetic polls (every GPU's memory moves,
one host in five goes down and comes back), and times, per poll:
  in place: FleetState.apply + the Fleet view's refresh (cells compared, changed ones updated)
  rebuild:  FleetState.apply + clearing the table and adding every row again (the baseline)
each as the synchronous step alone, as step + painting the table's visible 200x60 region
(`render_lines`, what the compositor asks the table for), and as step + whatever the event
loop does until the next frame is on screen (`pilot.pause()`, includes Textual's own work).
Prints medians and the ratio rebuild / in place. A frame at 60 Hz is 16.7 ms.

Then the same polls through textual-fastdatatable (harlequin's table, Arrow-backed), in the
same process and terminal size: it has no multi-line rows and stores no Rich `Text`, so each
host becomes one row per GPU line with every cell as Rich markup, and a poll replaces the
Arrow backend (its `update_cell` rewrites a whole column per call). Timed as apply (cells
built + backend replaced) and apply + paint (`render_lines` of the visible region), and
printed as a ratio against the DataTable's in-place apply + paint, the one the dashboard uses.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import types

from textual.app import App
from textual.geometry import Region
from textual.widgets import DataTable

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, GpuProcess, HostSnapshot, Run
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.rows.fleet import host_cells
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

G = 1024**3


def snapshot(n_hosts: int, n_gpus: int, i: int, rng: random.Random) -> FleetSnapshot:
    """Poll number `i` of a synthetic fleet."""
    hosts = []
    for h in range(n_hosts):
        name = f"gpu-{h:03d}"
        if h % 5 == 0 and i % 4 == 3:
            hosts.append(
                HostSnapshot(
                    name=name, reachable=False, error="connect timed out after 5s", time=1000.0 + i
                )
            )
            continue
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
            for g in range(n_gpus)
        )
        disks = (
            Disk("~/runs", "/", "ext4", 2000 * G, int(rng.uniform(0.2, 0.9) * 2000 * G), 0),
            Disk("/tank", "/tank", "zfs", 8000 * G, int(rng.uniform(0.2, 0.9) * 8000 * G), 0),
        )
        runs = (
            Run(
                host=name,
                path=f"/runs/run-{h}",
                name=f"run-{h}",
                state="running",
                step=i,
                max_steps=159,
            ),
        )
        hosts.append(
            HostSnapshot(
                name=name,
                reachable=True,
                latency_ms=rng.uniform(5, 80),
                gpus=gpus,
                disks=disks,
                runs=runs,
                time=1000.0 + i,
            )
        )
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


def clear_caches(table) -> None:
    """Empty the render caches a poll invalidates (DataTable's, keyed by its update count, and
    KeyedTable's row lines; not KeyedTable's cells, keyed by the cell object) and the widget's
    line cache, so that the next `render_lines` paints every visible line as a frame after a
    poll does (`refresh()` marks the whole table dirty)."""
    for cache in (
        table._cell_render_cache,
        table._row_render_cache,
        table._line_cache,
        table._lines.row_lines_cache,
    ):
        cache.clear()
    table._styles_cache.clear()


def paint(table: KeyedTable, stock: bool) -> float:
    """Milliseconds to paint the visible region: with DataTable's own rendering (cells cached
    by a table-wide update count, a row rendered line by line) or KeyedTable's (cells cached
    by the cell object, a row's lines built at once)."""
    clear_caches(table)
    methods = ("_render_cell", "_render_line_in_row")
    if stock:
        for name in methods:
            setattr(table, name, types.MethodType(getattr(DataTable, name), table))
    try:
        t0 = time.perf_counter()
        table.render_lines(Region(0, 0, table.size.width, table.size.height))
        return (time.perf_counter() - t0) * 1000
    finally:
        for name in methods:
            table.__dict__.pop(name, None)


async def main(n_hosts: int, n_gpus: int, polls: int) -> None:
    """Measure and print the medians and the ratio."""
    rng = random.Random(4919)
    snaps = [snapshot(n_hosts, n_gpus, i, rng) for i in range(polls + 1)]
    fleet = parse_fleet(
        "".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(n_hosts)), "bench"
    )
    app = FleetdeckApp(
        fleet, RecordedSource(snaps[:1]), autopoll=False, clock=lambda: 1000.0 + polls
    )
    results: dict[str, list[float]] = {
        k: []
        for k in (
            "in place",
            "rebuild",
            "in place + paint",
            "rebuild + paint",
            "in place + frame",
            "rebuild + frame",
            "paint, DataTable",
            "paint, KeyedTable",
        )
    }
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
                if mode == "in place" and i >= 3:
                    # the same paint with DataTable's own rendering and with KeyedTable's, each
                    # on emptied DataTable caches, so both start where a real frame would
                    results["paint, DataTable"].append(paint(table, stock=True))
                    results["paint, KeyedTable"].append(paint(table, stock=False))
                clear_caches(table)
                p0 = time.perf_counter()
                table.render_lines(Region(0, 0, table.size.width, table.size.height))
                p1 = time.perf_counter()
                await pilot.pause()
                t3 = time.perf_counter()
                if i >= 3:  # warm-up polls
                    results[mode].append((t1 - t0) * 1000)
                    results[mode + " + paint"].append((t1 - t0 + p1 - p0) * 1000)
                    results[mode + " + frame"].append((t1 - t0 + t3 - p1) * 1000)
            if mode == "rebuild":  # put the keyed rows back for the next in-place round
                rebuild(screen, table)
                screen.refresh_view()
    print(
        f"{n_hosts} hosts x {n_gpus} GPUs, {len(results['in place'])} polls measured, 200x60 terminal"
    )
    for k, v in results.items():
        print(
            f"  {k:<18} median {statistics.median(v):7.2f} ms   p90 {sorted(v)[int(len(v) * 0.9)]:7.2f} ms"
        )
    ratio = statistics.median(results["rebuild"]) / statistics.median(results["in place"])
    ratio_p = statistics.median(results["rebuild + paint"]) / statistics.median(
        results["in place + paint"]
    )
    print(f"  rebuild / in place: {ratio:.2f}x (apply step), {ratio_p:.2f}x (apply + paint)")
    stock, ours = (statistics.median(results[k]) for k in ("paint, DataTable", "paint, KeyedTable"))
    print(f"  paint: DataTable (baseline) / KeyedTable: {stock / ours:.2f}x")
    try:
        fast_results = await fast(snaps, n_hosts, polls)
    except ImportError:
        print(
            "  textual-fastdatatable is not installed (pip install textual-fastdatatable): skipped"
        )
        return
    for k, v in fast_results.items():
        print(
            f"  {k:<22} median {statistics.median(v):7.2f} ms   p90 {sorted(v)[int(len(v) * 0.9)]:7.2f} ms"
        )
    base = statistics.median(results["in place + paint"])
    ratio_f = statistics.median(fast_results["fastdatatable + paint"]) / base
    print(
        f"  fastdatatable / DataTable in place (apply + paint, baseline {base:.2f} ms): {ratio_f:.2f}x"
        f" ({'faster' if ratio_f < 1 else 'slower'})"
    )


def fast_rows(state, widths) -> list[list[str]]:
    """The fleet table as fastdatatable can hold it: one row per line, cells as markup."""
    rows = []
    for name in state.host_names:
        cells, height = host_cells(state, name, widths)
        split = [c.split("\n", allow_blank=True) for c in cells]
        for i in range(height):
            rows.append([parts[i].markup if i < len(parts) else "" for parts in split])
    return rows


async def fast(snaps, n_hosts: int, polls: int) -> dict[str, list[float]]:
    """The same polls through textual-fastdatatable: apply, and apply + paint."""
    from textual_fastdatatable import ArrowBackend
    from textual_fastdatatable import DataTable as FastTable

    fleet = parse_fleet(
        "".join(f"[hosts.gpu-{h:03d}]\nlocal = true\n" for h in range(n_hosts)), "bench"
    )
    state_app = FleetdeckApp(
        fleet, RecordedSource(snaps[:1]), autopoll=False, clock=lambda: 1000.0 + polls
    )
    from fleetdeck.tui.rows.fleet import COLUMNS
    from fleetdeck.tui.views.fleet import layout_widths

    widths = layout_widths(200)
    labels = [COLUMNS[k] for k in COLUMNS if k in widths]

    class FastApp(App):
        def compose(self):
            rows = (
                fast_rows(state_app.state, widths)
                if state_app.state.polls
                else [[""] * len(labels)]
            )
            yield FastTable(
                backend=ArrowBackend.from_records(rows),
                column_labels=labels,
                column_widths=[widths[k] for k in COLUMNS if k in widths],
                cursor_type="row",
                zebra_stripes=True,
                show_row_labels=False,
            )

    out: dict[str, list[float]] = {"fastdatatable": [], "fastdatatable + paint": []}
    state_app.state.apply(snaps[0])
    app = FastApp()
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        table = app.query_one(FastTable)
        for i, snap in enumerate(snaps[1:]):
            t0 = time.perf_counter()
            state_app.state.apply(snap)
            table.backend = ArrowBackend.from_records(fast_rows(state_app.state, widths))
            table._require_update_dimensions = True
            table._update_count += 1
            table.refresh()
            t1 = time.perf_counter()
            if table._require_update_dimensions:
                table._require_update_dimensions = False
                table._update_dimensions(range(table.row_count))
            table.render_lines(Region(0, 0, table.size.width, table.size.height))
            t2 = time.perf_counter()
            await pilot.pause()
            if i >= 3:
                out["fastdatatable"].append((t1 - t0) * 1000)
                out["fastdatatable + paint"].append((t2 - t0) * 1000)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--polls", type=int, default=30)
    a = ap.parse_args()
    asyncio.run(main(a.hosts, a.gpus, a.polls))
