"""The History view's chart against textual-plotext, on the same night of history.

    pip install 'textual-plotext==1.0.1' 'plotext>=5.2.8,<6'   # for this comparison only
    python benchmarks/history_chart.py [--repeat 20]

A night as the operator leaves it: six hours of polls, one a minute, of a host whose GPU memory
creeps up, whose disk fills, whose run's loss falls and whose eval loss is taken (six series on
four scales). Both renderers draw it at 80x24 and 140x40, and the script prints, for each:
  - the CPU time of one render (median of --repeat), the baseline being today's chart
    (`fleetdeck.tui.charts.history_table`, sparklines on shared time buckets);
  - how many of the six series are on screen at once, each with its own scale and figures;
  - what a run name holding an escape sequence and Rich markup becomes.
textual-plotext draws one plot per widget: a series per plot (their scales differ), stacked.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import tempfile
import time

NIGHT_RUN = "/runs/run-\x1b]52;c;SGVsbG8=\x07[bold]x"


def night(now: float) -> None:
    from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run
    from fleetdeck.backend.monitor.history import History, history_path

    h = History(history_path())
    start = now - 6 * 3600
    for i in range(6 * 60):
        t = start + i * 60
        host = HostSnapshot(
            name="gx10", reachable=True, time=t, latency_ms=20.0,
            gpus=(Gpu(index=0, name="GB10", uuid="GPU-0", unified_memory=True, memory_total_mib=120_000.0,
                      memory_used_mib=10_000 + i * 150.0, utilization_pct=50.0 + (i % 7)),),
            disks=(Disk(path="/tank", mount="/tank", fstype="zfs", total_bytes=10**12,
                        used_bytes=4 * 10**11 + i * 10**8, free_bytes=6 * 10**11 - i * 10**8),),
            runs=(Run(host="gx10", path=NIGHT_RUN, name=NIGHT_RUN.rsplit("/", 1)[1], state="running", step=i,
                      loss=3.0 - i / 400, eval_losses=((i, 3.1 - i / 500),)),))
        h.record(FleetSnapshot(hosts=(host,), time=t))
    h.close()


def series():
    """Every recorded row of the night, by kind and series (what plotext is given)."""
    from fleetdeck.backend.monitor.history import History, history_path
    from fleetdeck.tui.charts import KINDS

    h = History(history_path())
    try:
        return {kind: h.series("gx10", kind, time.time() - 7 * 3600) for kind in KINDS}
    finally:
        h.close()


def ours(width: int, repeat: int) -> tuple[float, str]:
    from rich.console import Console

    from fleetdeck.backend.monitor.history import History, history_path
    from fleetdeck.tui.charts import collect, history_table

    cells = max(10, width - 60)
    h = History(history_path())
    try:   # the cells are the database's work, read once: what is timed is the render
        data = collect(h, "gx10", time.time() - 7 * 3600, 7 * 3600, cells)
    finally:
        h.close()
    times, text = [], ""
    for _ in range(repeat):
        c0 = time.process_time()
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None, soft_wrap=False).print(
            history_table(data, "gx10", 7 * 3600, cells))
        times.append(time.process_time() - c0)
        text = buf.getvalue()
    return statistics.median(times) * 1000, text


async def plotext(data, size: tuple[int, int], repeat: int) -> tuple[float, int, str]:
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll
    from textual_plotext import PlotextPlot

    lines = []
    for name, pts in sorted(data["gpu"].items()):
        lines.append((f"GPU{name.partition(':')[0]} memory MiB", [p[1] for p in pts]))
        lines.append((f"GPU{name.partition(':')[0]} utilisation %", [p[2] for p in pts]))
    for name, pts in sorted(data["disk"].items()):
        lines.append((f"disk {name} used", [p[1] for p in pts]))
    for kind, label in (("run", "loss"), ("eval", "eval loss")):
        for name, pts in sorted(data[kind].items()):
            lines.append((f"{name.rsplit('/', 1)[-1]} {label}", [p[2] for p in pts]))

    class Charts(App):
        def compose(self) -> ComposeResult:
            with VerticalScroll():
                for title, ys in lines:
                    p = PlotextPlot()
                    p.styles.height = 10   # the least that shows axes, ticks and a title legibly
                    p.plt.title(title)
                    p.plt.plot([v for v in ys if v is not None])
                    yield p

    app = Charts()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        plots = list(app.query(PlotextPlot))
        shown = sum(1 for p in plots if p.region.height and p.region.y + p.region.height <= size[1])
        times = []
        for _ in range(repeat):
            c0 = time.process_time()
            for p in plots:
                p.render()
            times.append(time.process_time() - c0)
        hostile = plots[-1]._plot.build()
    return statistics.median(times) * 1000, shown, hostile


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_STATE_HOME"] = d
        night(time.time())
        data = series()
        n = 6  # GPU0 memory, GPU0 utilisation, disk, loss, eval loss, answered
        for size in ((80, 24), (140, 40)):
            ms, text = ours(size[0], args.repeat)
            body = [line for line in text.splitlines()[2:] if line.strip()]  # under the title and header
            print(f"{size[0]}x{size[1]} today's chart: {ms:.2f} ms CPU a render; "
                  f"{min(len(body), size[1] - 4)} of {n} series on screen, each with first/last/peak")
            try:
                pms, shown, hostile = await plotext(data, size, args.repeat)
            except ImportError:
                print("  textual-plotext is not installed: pip install 'textual-plotext==1.0.1' 'plotext>=5.2.8,<6'")
                return
            print(f"{size[0]}x{size[1]} textual-plotext: {pms:.2f} ms CPU a render ({pms / ms:.1f}x today's); "
                  f"{shown} of {n} series on screen at 10 rows a plot (it has no 'answered' series)")
        label = next(line for line in text.splitlines() if "loss" in line)
        print("run name in today's chart:", repr(label.split("  ")[0]))
        print("run name as plotext builds it (before Text.from_ansi):",
              "raw ESC present" if "\x1b]52" in hostile else "no raw ESC", "| '[bold]' kept as text:", "[bold]" in hostile)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    asyncio.run(main(ap.parse_args()))
