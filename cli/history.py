"""`fleetdeck history HOST [--since DURATION] [--json] [--width N]`: what the poll history holds for one host.
`fleetdeck history HOST --gpu N --plot [--figure F] [--height R]`: one card's incident, a full-height
plot of its memory (or utilisation, temperature, power) with the host's events on the same time
axis (`backend/monitor/history/incident.py`, drawn by `show/incident_plot.py`); `--seat PORT` instead of
`--gpu N` plots a seat's own memory.

GPU memory and utilisation per GPU, disk use per root, each live run's loss and eval loss, and
the host's answers, read from the history database that `watch` (and the dashboard) write. Each
series is one line: a sparkline over the window, the same time buckets for every series, on a
fixed scale (GPU memory from 0 to its peak, utilisation 0-100%, disk use against the filesystem,
a loss against its own range), with its first, last and peak figures, so "memory crept up all
night" reads at a glance. A bucket with no sample is blank (the host did not answer).

`first` is the oldest value recorded in the window, `last` the newest, `peak` the largest, read
from the rows themselves; a cell folds its rows by the figure's kind (a loss or disk use by its
newest value, GPU memory by its peak, utilisation and answers by their mean):
`backend/monitor/history/figures.py`, the same rule the database folds its rows by.

Memory does not grow with the window: the cells and figures are worked out by SQLite
(`History.chart`), and `--json` is written as its rows are read (`History.stream`). `--width` is
10 to 1000 cells; a corrupt or unreadable database is one sentence naming it and exit 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import deque
from itertools import groupby
from operator import itemgetter
from typing import TextIO

from rich.console import Console

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.host.lib.units import duration_short
from fleetdeck.backend.monitor.history.figures import Tally
from fleetdeck.backend.monitor.history.incident import FIGURES as INCIDENT_FIGURES
from fleetdeck.backend.monitor.history.incident import incident
from fleetdeck.backend.monitor.history.store import History, history_path
from fleetdeck.show.charts import KINDS, collect, history_table
from fleetdeck.show.incident_plot import incident_plot

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> float:
    """'90s', '30m', '24h', '7d', '2w' (or plain seconds) as seconds; argparse's type."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", text)
    if (
        not m
        or float(m.group(1)) <= 0
        or float(m.group(1)) * UNITS[m.group(2) or "s"] > 10 * 366 * 86400
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration such as 90s, 30m, 24h or 7d (above 0, at most ten years)"
        )
    return float(m.group(1)) * UNITS[m.group(2) or "s"]


#: `--width`: a sparkline narrower than ten cells says nothing, one wider than a thousand is wider
#: than any terminal (and each cell is a figure worked out per series)
WIDTH_MIN, WIDTH_MAX = 10, 1000


def width(text: str) -> int:
    """A sparkline width from WIDTH_MIN to WIDTH_MAX cells; argparse's type."""
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or not WIDTH_MIN <= n <= WIDTH_MAX:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a sparkline width: a whole number of cells from "
            f"{WIDTH_MIN} to {WIDTH_MAX}"
        )
    return n


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "history",
        help="one host's recorded GPU memory, utilisation, disks and losses",
        description="What the poll history (written by `fleetdeck watch` and the dashboard) "
        "holds for HOST over the window: one sparkline per GPU, disk, run and eval series.",
    )
    p.add_argument("host", metavar="HOST")
    p.add_argument(
        "--since",
        type=duration,
        default=86400.0,
        metavar="DURATION",
        help="how far back: 90s, 30m, 24h (default), 7d, 2w",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the series as one JSON document, written as it is read",
    )
    p.add_argument(
        "--width",
        type=width,
        default=None,
        metavar="N",
        help=f"sparkline width in cells, {WIDTH_MIN} to {WIDTH_MAX} (default: fits the terminal)",
    )
    p.add_argument(
        "--gpu",
        type=gpu_index,
        default=None,
        metavar="N",
        help="with --plot: the card, by its index",
    )
    p.add_argument(
        "--seat",
        default=None,
        metavar="PORT",
        help="with --plot: a seat's memory instead (its port, or its host:port:kind)",
    )
    p.add_argument(
        "--plot",
        action="store_true",
        help="draw one card's figure as a full-height plot with the host's events on the same time axis",
    )
    p.add_argument(
        "--figure",
        choices=tuple(INCIDENT_FIGURES),
        default="memory",
        help="with --plot: memory (default), utilisation, temperature or power",
    )
    p.add_argument(
        "--height",
        type=plot_height,
        default=16,
        metavar="ROWS",
        help="with --plot: rows, 4 to 200 (16)",
    )
    p.set_defaults(func=cmd_history)


def gpu_index(text: str) -> int:
    """A card's index, 0 to 1023; argparse's type."""
    if not text.strip().isdigit() or int(text) > 1023:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a GPU index (a whole number from 0 to 1023)"
        )
    return int(text)


def plot_height(text: str) -> int:
    """The plot's height in rows, 4 to 200; argparse's type."""
    if not text.strip().isdigit() or not 4 <= int(text) <= 200:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a plot height (a whole number of rows from 4 to 200)"
        )
    return int(text)


def _unreadable(hist) -> int:
    """One sentence naming the database and what SQLite said of it; exit 1."""
    print(
        f"fleetdeck: the history database {hist.path} cannot be read ({hist.error}): it is corrupt or not "
        "readable here; nothing is shown from it",
        file=sys.stderr,
    )
    return 1


def _rows(pts: list) -> str:
    """A chunk of rows as JSON, one row a line (the encoder does the chunk at once, the lines
    are split after)."""
    return json.dumps(pts)[1:-1].replace("], [", "],\n    [")


def write_json(
    hist,
    host: str,
    since: float,
    until: float,
    out: TextIO,
    keep: int | None = None,
    series_max: int = 64,
) -> bool:
    """The `--json` document of `host` since `since`, written to `out` as its rows are read
    (`History.stream`, a chunk at a time): each series' rows, one a line, then each series'
    first, last and peak, tallied as the rows went past (`Tally`), then the warnings. What is held
    is one chunk of rows and a tally a series. False when the database could not be read (the
    document, written to its end, names why in its warnings).

    `keep` bounds the document: only the newest `keep` rows of a series, and the first
    `series_max` series of a kind, are written (the figures are still the whole window's), and `left_out`
    counts what was not: `{"rows": {kind: {series: n}}, "series": {kind: n}}`."""
    w = out.write
    w(
        "{"
        + f'"host": {json.dumps(host)}, "since": {json.dumps(since)}, "until": {json.dumps(until)},\n "series": {{'
    )
    tallies: dict[str, dict[str, Tally]] = {}
    left: dict[str, dict] = {"rows": {}, "series": {}}
    for k, kind in enumerate(KINDS):
        w(("," if k else "") + f"\n  {json.dumps(kind)}: {{")
        seen = tallies.setdefault(kind, {})
        series = groupby(hist.stream(host, kind, since), key=itemgetter(0))
        for i, (name, chunks) in enumerate(series):
            if keep is not None and i >= series_max:
                left["series"][kind] = left["series"].get(kind, 0) + 1
                continue
            tally = seen[name] = Tally()
            w(("," if i else "") + f"\n   {json.dumps(name)}: [\n    ")
            tail: deque = deque(maxlen=keep)
            count = 0
            for j, (_, pts) in enumerate(chunks):
                tally.add(pts)
                if keep is None:
                    w((",\n    " if j else "") + _rows(pts))
                else:
                    tail.extend(pts)
                    count += len(pts)
            if keep is not None:
                w(_rows(list(tail)))
                if count > keep:
                    left["rows"].setdefault(kind, {})[name] = count - keep
            w("\n   ]")
        w("\n  }")
    figures = {
        kind: {name: t.figures(kind) for name, t in v.items()} for kind, v in tallies.items()
    }
    w(
        "\n },\n "
        + '"figures": '
        + json.dumps(figures, indent=1).replace("\n", "\n ")
        + ",\n "
        + (f'"left_out": {json.dumps(left)},\n ' if keep is not None else "")
        + '"warnings": '
        + json.dumps(list(hist.warnings))
        + "\n}\n"
    )
    return not hist.warnings


def cmd_history(args: argparse.Namespace) -> int:
    path = history_path()
    if not path.exists():
        print(
            f"fleetdeck: no history yet ({path} does not exist): `fleetdeck watch` or the dashboard "
            "records it while it polls",
            file=sys.stderr,
        )
        return 1
    if args.plot != (args.gpu is not None or args.seat is not None) or (
        args.gpu is not None and args.seat is not None
    ):
        print(
            "fleetdeck: --plot goes with one of --gpu N or --seat PORT: `fleetdeck history HOST --gpu N --plot`",
            file=sys.stderr,
        )
        return 2
    now = time.time()
    since = now - args.since
    hist = History(path)
    try:
        # opens and reads the database: a corrupt one is said so before any output
        names = hist.names(args.host)
        if hist.warnings:
            return _unreadable(hist)
        if args.plot and args.gpu is not None and args.seat is None and names.get("host"):
            if not names.get("gpu"):
                # a GPU figure asked of a host that has none is not "nothing recorded"
                print(f"{args.host} has no GPU: none was ever recorded for it", file=sys.stderr)
                return 1
        if args.plot:
            return _plot(hist, args, since, now)
        if args.json:
            ok = write_json(hist, args.host, since, now, sys.stdout)
            return 0 if ok else _unreadable(hist)
        console = Console(soft_wrap=False, highlight=False)
        cells = args.width or max(WIDTH_MIN, min(120, console.width - 60))
        data = collect(hist, args.host, since, args.since, cells)
    finally:
        hist.close()
    if hist.warnings:
        return _unreadable(hist)
    if not any(data.values()):
        print(f"nothing recorded for {args.host} in the last {duration_short(args.since)}")
        return 0
    console.print(history_table(data, args.host, args.since, cells))
    return 0


def _plot(hist, args: argparse.Namespace, since: float, now: float) -> int:
    console = Console(soft_wrap=False, highlight=False)
    cells = args.width or max(WIDTH_MIN, min(WIDTH_MAX, console.width - 12))
    try:
        audit = read_audit()
    except OSError as e:
        print(
            f"fleetdeck: the audit log cannot be read ({e}): its events are left out",
            file=sys.stderr,
        )
        audit = []
    inc = incident(
        hist,
        args.host,
        -1 if args.gpu is None else args.gpu,
        args.figure,
        since,
        now,
        cells,
        audit,
        seat=args.seat,
    )
    if hist.warnings:
        return _unreadable(hist)
    if inc is None:
        what = f"GPU{args.gpu}" if args.seat is None else f"seat {args.seat}"
        print(
            f"nothing recorded for {what} of {args.host} in the last {duration_short(args.since)}"
        )
        return 0
    console.print(
        incident_plot(inc, args.height), soft_wrap=True
    )  # --width wider than the terminal: not wrapped
    return 0
