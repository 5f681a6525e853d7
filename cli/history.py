"""`fleetdeck history HOST [--since DURATION] [--json]`: what the poll history holds for one host.

GPU memory and utilisation per GPU, disk use per root, each live run's loss and eval loss, and
the host's answers, read from the history database that `watch` (and the dashboard) write. Each
series is one line: a sparkline over the window, the same time buckets for every series, on a
fixed scale (GPU memory from 0 to its peak, utilisation 0-100%, disk use against the filesystem,
a loss against its own range), with its first, last and peak figures, so "memory crept up all
night" reads at a glance. A bucket with no sample is blank (the host did not answer).

`first` is the oldest value recorded in the window, `last` the newest, `peak` the largest, read
from the rows themselves; a cell folds its rows by the figure's kind (a loss or disk use by its
newest value, GPU memory by its peak, utilisation and answers by their mean):
`backend/monitor/history_figures.py`, the same rule the database folds its rows by.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

from rich.console import Console

from fleetdeck.backend.monitor.history_figures import figures
from fleetdeck.tui.charts import collect, history_table
from fleetdeck.tui.fmt import human_duration

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


def cmd_history(args: argparse.Namespace) -> int:
    from fleetdeck.backend.monitor.history import History, history_path

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
                          "figures": {k: {n: figures(k, pts) for n, pts in v.items()} for k, v in data.items()},
                          "warnings": warnings}, indent=1))
        return 0
    if not any(data.values()):
        print(f"nothing recorded for {args.host} in the last {human_duration(args.since)}")
        return 0
    console = Console(soft_wrap=False, highlight=False)
    width = args.width or max(10, min(120, console.width - 60))
    t = history_table(data, args.host, since, args.since, width)
    console.print(t)
    for w in warnings:
        print(f"fleetdeck: history: {w}", file=sys.stderr)
    return 0
