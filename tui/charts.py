"""History as text: one sparkline line per recorded series of a host (rich only, no textual),
shared by `fleetdeck history` and the dashboard's History view. What a cell and each figure
column mean is `backend/monitor/history_figures.py`'s rule, the one the database folds by."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from fleetdeck.backend.monitor.history_figures import fold, fold_in, fold_of, fold_out, summarise
from fleetdeck.tui.fmt import host_text, human_bytes, human_duration, human_mib

SPARK = "▁▂▃▄▅▆▇█"
KINDS = ("gpu", "disk", "run", "eval", "host", "seat")
Points = list[tuple[int, float | None, float | None]]
Series = dict[str, dict[str, Points]]


def spark(values: list[float | None], width: int, lo: float, hi: float, how: str = "max") -> str:
    """`values` resampled to `width` buckets (each folded by `how`: 'max', 'last' or 'mean', see
    `history_figures.fold`), drawn on lo..hi; a bucket with no sample is a space (the host was
    down, or nothing was recorded)."""
    if not values:
        return " " * width
    n = len(values)
    out = []
    for i in range(width):
        a, b = i * n // width, max(i * n // width + 1, (i + 1) * n // width)
        v = fold([v for v in values[a:b] if v is not None], how)
        if v is None:
            out.append(" ")
            continue
        frac = (v - lo) / ((hi - lo) or 1.0)
        out.append(SPARK[min(len(SPARK) - 1, max(0, int(frac * (len(SPARK) - 1) + 0.5)))])
    return "".join(out)


def collect(hist: Any, host: str, since: float) -> Series:
    """{kind: {series name: [(t, a, b)...]}} of `host` since `since`, for the kinds shown."""
    return {kind: hist.series(host, kind, since) for kind in KINDS}


def history_table(data: Series, host: str, since: float, window: float, width: int) -> Table:
    """One row per series: its sparkline over the window on shared time buckets, on a fixed
    scale (GPU memory 0..its peak, utilisation 0..100%, disk use against the filesystem, a loss
    against its own range), each cell folding its rows as the figure's kind says (`FIGURES`: a
    loss or disk use by its newest value, GPU memory by its peak, utilisation and answers by
    their mean); then the figure's first (oldest recorded value of the window), last (newest) and
    peak (largest), read from the rows, never from the cells."""
    t = Table(title=Text(f"{host}: the last {human_duration(window)}"), box=None, pad_edge=False)
    for col in ("series", "over time", "first", "last", "peak"):
        t.add_column(col, no_wrap=True, overflow="ellipsis")
    step = max(60, int(window // width) or 60)

    def grid(kind: str, pts: Points, i: int) -> list[float | None]:
        how = fold_of(kind, i)
        cells: list[float | None] = [None] * width
        counts = [0] * width
        for ts, a, b in pts:
            v = (a, b)[i]
            if v is not None:
                k = min(width - 1, max(0, int((ts - since) // step)))
                cells[k], counts[k] = fold_in(cells[k], v, how), counts[k] + 1
        return [fold_out(c, n, how) for c, n in zip(cells, counts, strict=True)]

    def row(label: Text | str, kind: str, pts: Points, i: int, lo: float, hi: float, fmt: Any,
            cells: list[float | None] | None = None) -> None:
        s = summarise(pts, i)
        if s is None:
            return
        cells = grid(kind, pts, i) if cells is None else cells
        t.add_row(label, Text(spark(cells, width, lo, hi), style="cyan"), fmt(s.first), fmt(s.last), fmt(s.peak))

    for name, pts in sorted(data.get("gpu", {}).items()):
        idx = name.partition(":")[0]
        mem = grid("gpu", pts, 0)
        peak = max((v for v in mem if v is not None), default=0.0)
        row(Text(f"GPU{idx} memory"), "gpu", pts, 0, 0.0, max(peak, 1.0), human_mib, mem)
        row(Text(f"GPU{idx} utilisation"), "gpu", pts, 1, 0.0, 100.0, lambda v: f"{v:.0f}%")
    for name, pts in sorted(data.get("disk", {}).items()):
        used, free = grid("disk", pts, 0), grid("disk", pts, 1)
        total = max((u + f for u, f in zip(used, free, strict=True) if u is not None and f is not None), default=0.0)
        row(Text.assemble("disk ", host_text(name)), "disk", pts, 0, 0.0, total or 1.0, human_bytes, used)
    for kind, label in (("run", "loss"), ("eval", "eval loss")):
        for name, pts in sorted(data.get(kind, {}).items()):
            cells = grid(kind, pts, 1)
            vals = [v for v in cells if v is not None]
            if vals:
                row(Text.assemble(host_text(name.rsplit("/", 1)[-1]), f" {label}"), kind, pts, 1, min(vals),
                    max(vals), lambda v: f"{v:.4g}", cells)
    for _name, pts in data.get("host", {}).items():
        row(Text("answered"), "host", pts, 0, 0.0, 1.0, lambda v: f"{100 * v:.0f}%")
    return t
