"""The History view's chart against textual-plotext, on the same night of history.

    pip install 'textual-plotext==1.0.1' 'plotext>=5.2.8,<6'   # for this comparison only
    python benchmarks/history_chart.py [--repeat 20]

A night as the operator leaves it: six hours of polls, one a minute, of a host whose GPU memory
creeps up, whose disk fills, whose run's loss falls and whose eval loss is taken (six series on
four scales). Both renderers draw it at 80x24 and 140x40, and the script prints, for each:
  - the CPU time of one render (median of --repeat), the baseline being today's chart
    (`fleetdeck.show.charts.history_table`, sparklines on shared time buckets);
  - how many of the six series are on screen at once, each with its own scale and figures;
  - what a run name holding an escape sequence and Rich markup becomes.
textual-plotext draws one plot per widget: a series per plot (their scales differ), stacked.

`--incident` compares the incident plot instead (`history HOST --gpu N --plot`, the History
view's `c`): one card's memory over six hours, full height, with five events on the same time
axis (a seat OOM-killed, a purge, the host down, an Xid, a run finishing), drawn by today's
`show/incident_plot.py` and by plotext itself (`pip install 'plotext>=5.2.8,<6'`: a line plot
with a vertical line and a text label at each event), at 80x24 and 130x40: the CPU of one
render (median of --repeat), and what an event text holding an escape sequence becomes (the
history's sink rule stores it escaped, so neither renderer is handed the raw bytes).
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
    from fleetdeck.backend.monitor.history.store import History, history_path

    h = History(history_path())
    start = now - 6 * 3600
    for i in range(6 * 60):
        t = start + i * 60
        host = HostSnapshot(
            name="gx10",
            reachable=True,
            time=t,
            latency_ms=20.0,
            gpus=(
                Gpu(
                    index=0,
                    name="GB10",
                    uuid="GPU-0",
                    unified_memory=True,
                    memory_total_mib=120_000.0,
                    memory_used_mib=10_000 + i * 150.0,
                    utilization_pct=50.0 + (i % 7),
                ),
            ),
            disks=(
                Disk(
                    path="/tank",
                    mount="/tank",
                    fstype="zfs",
                    total_bytes=10**12,
                    used_bytes=4 * 10**11 + i * 10**8,
                    free_bytes=6 * 10**11 - i * 10**8,
                ),
            ),
            runs=(
                Run(
                    host="gx10",
                    path=NIGHT_RUN,
                    name=NIGHT_RUN.rsplit("/", 1)[1],
                    state="running",
                    step=i,
                    loss=3.0 - i / 400,
                    eval_losses=((i, 3.1 - i / 500),),
                ),
            ),
        )
        h.record(FleetSnapshot(hosts=(host,), time=t))
    h.close()


def series():
    """Every recorded row of the night, by kind and series (what plotext is given)."""
    from fleetdeck.backend.monitor.history.store import History, history_path
    from fleetdeck.show.charts import KINDS

    h = History(history_path())
    try:
        return {kind: h.series("gx10", kind, time.time() - 7 * 3600) for kind in KINDS}
    finally:
        h.close()


def ours(width: int, repeat: int) -> tuple[float, str]:
    from rich.console import Console

    from fleetdeck.backend.monitor.history.store import History, history_path
    from fleetdeck.show.charts import collect, history_table

    cells = max(10, width - 60)
    h = History(history_path())
    try:  # the cells are the database's work, read once: what is timed is the render
        data = collect(h, "gx10", time.time() - 7 * 3600, 7 * 3600, cells)
    finally:
        h.close()
    times, text = [], ""
    for _ in range(repeat):
        c0 = time.process_time()
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None, soft_wrap=False).print(
            history_table(data, "gx10", 7 * 3600, cells)
        )
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
                    p.styles.height = 10  # the least that shows axes, ticks and a title legibly
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


EVENT_TEXT = "seat vllm:8000 \x1b]52;c;SGVsbG8=\x07[bold]OOM-killed"


def incident_night(now: float) -> None:
    """Six hours of one card at 93,257 MiB with a six-minute dip, and five events."""
    from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, HostSnapshot
    from fleetdeck.backend.monitor.history.store import History, history_path

    h = History(history_path())
    start = now - 6 * 3600
    for i in range(6 * 60):
        t = start + i * 60
        used = 600.0 if 120 <= i < 126 else 93257.0
        h.record(
            FleetSnapshot(
                hosts=(
                    HostSnapshot(
                        name="gx10",
                        reachable=True,
                        time=t,
                        gpus=(
                            Gpu(
                                index=0,
                                name="H200",
                                uuid="GPU-0",
                                unified_memory=False,
                                memory_total_mib=143771.0,
                                memory_used_mib=used,
                                utilization_pct=90.0,
                            ),
                        ),
                    ),
                ),
                time=t,
            )
        )
    for k, (rule, text) in enumerate(
        (
            ("seat-restart vllm:8000", EVENT_TEXT),
            ("run-finished /r/run-6", "run-6 finished"),
            ("host-down gx10", "gx10 down"),
            ("gpu-xid GPU0 Xid 79", "Xid 79"),
            ("run-failed /r/run-7", "run-7 failed"),
        )
    ):
        h.event(start + (2 + k * 0.8) * 3600, "gx10", "alert-firing", rule, text)
    h.close()


def incident_ours(size: tuple[int, int], repeat: int) -> tuple[float, str]:
    from rich.console import Console

    from fleetdeck.backend.monitor.history.incident import incident
    from fleetdeck.backend.monitor.history.store import History, history_path
    from fleetdeck.show.incident_plot import incident_plot

    now = time.time()
    h = History(history_path())
    try:  # the timeline is the database's work, read once: what is timed is the render
        inc = incident(h, "gx10", 0, "memory", now - 6 * 3600, now, size[0] - 12)
    finally:
        h.close()
    rows = max(
        4, size[1] - 4 - 2 - len(inc.events) - 1
    )  # the title, axis, ticks, lane and legend below it
    times, text = [], ""
    for _ in range(repeat):
        c0 = time.process_time()
        buf = io.StringIO()
        Console(file=buf, width=size[0], color_system="truecolor", soft_wrap=True).print(
            incident_plot(inc, rows)
        )
        times.append(time.process_time() - c0)
        text = buf.getvalue()
    return statistics.median(times) * 1000, text


def incident_plotext(size: tuple[int, int], repeat: int) -> tuple[float, str]:
    import plotext as plt

    from fleetdeck.backend.monitor.history.store import History, history_path

    now = time.time()
    h = History(history_path())
    try:
        pts = h.series("gx10", "gpu", now - 6 * 3600)["0:GPU-0"]
        events = [e for e in h.events(now - 6 * 3600) if e["host"] == "gx10"]
    finally:
        h.close()
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    times, text = [], ""
    for _ in range(repeat):
        c0 = time.process_time()
        plt.clear_figure()
        plt.plotsize(size[0], size[1])
        plt.title("gx10 GPU0 memory MiB, the last 6h")
        plt.plot(xs, ys)
        for e in events:
            plt.vline(e["t"], "red")
            plt.text(e["text"], e["t"], max(ys) * 0.9)
        text = plt.build()
        times.append(time.process_time() - c0)
    return statistics.median(times) * 1000, text


def incident_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_STATE_HOME"] = d
        incident_night(time.time())
        for size in ((80, 24), (130, 40)):
            ms, text = incident_ours(size, args.repeat)
            print(f"{size[0]}x{size[1]} today's incident plot: {ms:.2f} ms CPU a render")
            try:
                pms, ptext = incident_plotext(size, args.repeat)
            except ImportError:
                print("  plotext is not installed: pip install 'plotext>=5.2.8,<6'")
                return
            print(
                f"{size[0]}x{size[1]} plotext: {pms:.2f} ms CPU a render ({pms / ms:.1f}x today's)"
            )
        # the history stores an event's text through its sink rule (sql_text): both are handed it escaped
        line = next((x for x in text.splitlines() if "seat restart" in x), "")
        print(
            "event text in today's plot:",
            repr(line.split("seat restart", 1)[-1].strip()[:60]),
            "| raw ESC in today's:",
            "\x1b]52" in text,
            "| in plotext's:",
            "\x1b]52" in ptext,
        )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_STATE_HOME"] = d
        night(time.time())
        data = series()
        n = 6  # GPU0 memory, GPU0 utilisation, disk, loss, eval loss, answered
        for size in ((80, 24), (140, 40)):
            ms, text = ours(size[0], args.repeat)
            body = [
                line for line in text.splitlines()[2:] if line.strip()
            ]  # under the title and header
            print(
                f"{size[0]}x{size[1]} today's chart: {ms:.2f} ms CPU a render; "
                f"{min(len(body), size[1] - 4)} of {n} series on screen, each with first/last/peak"
            )
            try:
                pms, shown, hostile = await plotext(data, size, args.repeat)
            except ImportError:
                print(
                    "  textual-plotext is not installed: pip install 'textual-plotext==1.0.1' 'plotext>=5.2.8,<6'"
                )
                return
            print(
                f"{size[0]}x{size[1]} textual-plotext: {pms:.2f} ms CPU a render ({pms / ms:.1f}x today's); "
                f"{shown} of {n} series on screen at 10 rows a plot (it has no 'answered' series)"
            )
        label = next(line for line in text.splitlines() if "loss" in line)
        print("run name in today's chart:", repr(label.split("  ")[0]))
        print(
            "run name as plotext builds it (before Text.from_ansi):",
            "raw ESC present" if "\x1b]52" in hostile else "no raw ESC",
            "| '[bold]' kept as text:",
            "[bold]" in hostile,
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--incident", action="store_true", help="compare the incident plot instead")
    a = ap.parse_args()
    if a.incident:
        incident_main(a)
    else:
        asyncio.run(main(a))
