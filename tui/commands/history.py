"""`fleetdeck history HOST [--since DURATION] [--json]`: what the poll history holds for one host.

GPU memory and utilisation per GPU, disk use per root, each live run's loss and eval loss, and
the host's answers, read from the history database that `watch` (and the dashboard) write. Each
series is one line: a sparkline over the window, the same time buckets for every series, on a
fixed scale (GPU memory from 0 to its peak, utilisation 0-100%, disk use against the filesystem,
a loss against its own range), with its first, last and peak figures, so "memory crept up all
night" reads at a glance. A bucket with no sample is blank (the host did not answer).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..fmt import host_text, human_bytes, human_duration, human_mib

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> float:
    """'90s', '30m', '24h', '7d', '2w' (or plain seconds) as seconds; argparse's type."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", text)
    if not m or float(m.group(1)) <= 0 or float(m.group(1)) * UNITS[m.group(2) or "s"] > 10 * 366 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 30m, 24h or 7d "
                                         "(above 0, at most ten years)")
    return float(m.group(1)) * UNITS[m.group(2) or "s"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="one host's recorded GPU memory, utilisation, disks and losses",
                       description="What the poll history (written by `fleetdeck watch` and the dashboard) "
                       "holds for HOST over the window: one sparkline per GPU, disk, run and eval series.")
    p.add_argument("host", metavar="HOST")
    p.add_argument("--since", type=duration, default=86400.0, metavar="DURATION",
                   help="how far back: 90s, 30m, 24h (default), 7d, 2w")
    p.add_argument("--json", action="store_true", help="print the series as one JSON document")
    p.add_argument("--width", type=int, default=None, metavar="N", help="sparkline width (default: fits)")
    p.set_defaults(func=cmd_history)


SPARK = "▁▂▃▄▅▆▇█"


def spark(values: list[float | None], width: int, lo: float, hi: float) -> str:
    """`values` resampled to `width` buckets (each bucket's peak), drawn on lo..hi; a bucket
    with no sample is a space (the host was down, or nothing was recorded)."""
    if not values:
        return " " * width
    n = len(values)
    out = []
    for i in range(width):
        a, b = i * n // width, max(i * n // width + 1, (i + 1) * n // width)
        bucket = [v for v in values[a:b] if v is not None]
        if not bucket:
            out.append(" ")
            continue
        frac = (max(bucket) - lo) / ((hi - lo) or 1.0)
        out.append(SPARK[min(len(SPARK) - 1, max(0, int(frac * (len(SPARK) - 1) + 0.5)))])
    return "".join(out)


def collect(hist, host: str, since: float) -> dict[str, dict[str, list[tuple[int, float | None, float | None]]]]:
    """{kind: {series name: [(t, a, b)...]}} for the kinds the view shows."""
    return {kind: hist.series(host, kind, since) for kind in ("gpu", "disk", "run", "eval", "host", "seat")}


def cmd_history(args: argparse.Namespace) -> int:
    from fleetdeck.backend.history import History, history_path

    path = history_path()
    if not path.exists():
        print(f"fleetdeck: no history yet ({path} does not exist): `fleetdeck watch` or the dashboard "
              "records it while it polls", file=sys.stderr)
        return 1
    now = time.time()
    since = now - args.since
    hist = History(path)
    try:
        data = collect(hist, args.host, since)
        warnings = list(getattr(hist, "warnings", []) or [])
    finally:
        hist.close()
    if args.json:
        print(json.dumps({"host": args.host, "since": since, "until": now,
                          "series": {k: {n: [list(p) for p in pts] for n, pts in v.items()} for k, v in data.items()},
                          "warnings": warnings}, indent=1))
        return 0
    if not any(data.values()):
        print(f"nothing recorded for {args.host} in the last {human_duration(args.since)}")
        return 0
    console = Console(soft_wrap=False, highlight=False)
    width = args.width or max(10, min(120, console.width - 60))
    t = Table(title=Text(f"{args.host}: the last {human_duration(args.since)}"), box=None, pad_edge=False)
    for col in ("series", "over time", "first", "last", "peak"):
        t.add_column(col, no_wrap=True, overflow="ellipsis")
    # bucketed on the window, so that series line up in time
    step = max(60, int(args.since // width) or 60)

    def grid(pts: list[tuple[int, float | None, float | None]], i: int) -> list[float | None]:
        cells: list[float | None] = [None] * width
        for ts, a, b in pts:
            v = (a, b)[i]
            k = min(width - 1, max(0, int((ts - since) // step)))
            if v is not None:
                cells[k] = v if cells[k] is None else max(cells[k], v)  # type: ignore[type-var]
        return cells

    def row(label: Text | str, cells: list[float | None], lo: float, hi: float, fmt) -> None:
        vals = [v for v in cells if v is not None]
        if not vals:
            return
        t.add_row(label, Text(spark(cells, width, lo, hi), style="cyan"), fmt(vals[0]), fmt(vals[-1]),
                  fmt(max(vals)))

    for name, pts in sorted(data["gpu"].items()):
        idx = name.partition(":")[0]
        mem = grid(pts, 0)
        peak = max((v for v in mem if v is not None), default=0.0)
        row(Text(f"GPU{idx} memory"), mem, 0.0, max(peak, 1.0), human_mib)
        row(Text(f"GPU{idx} utilisation"), grid(pts, 1), 0.0, 100.0, lambda v: f"{v:.0f}%")
    for name, pts in sorted(data["disk"].items()):
        used, free = grid(pts, 0), grid(pts, 1)
        total = max((u + f for u, f in zip(used, free, strict=True) if u is not None and f is not None), default=0.0)
        row(Text.assemble("disk ", host_text(name)), used, 0.0, total or 1.0, human_bytes)
    for kind, label in (("run", "loss"), ("eval", "eval loss")):
        for name, pts in sorted(data[kind].items()):
            cells = grid(pts, 1)
            vals = [v for v in cells if v is not None]
            if vals:
                row(Text.assemble(host_text(name.rsplit("/", 1)[-1]), f" {label}"), cells, min(vals), max(vals),
                    lambda v: f"{v:.4g}")
    for _name, pts in data["host"].items():
        row(Text("answered"), grid(pts, 0), 0.0, 1.0, lambda v: f"{100 * v:.0f}%")
    console.print(t)
    for w in warnings:
        print(f"fleetdeck: history: {w}", file=sys.stderr)
    return 0
