"""History as text: one sparkline line per recorded series of a host (rich only, no textual),
shared by `fleetdeck history` and the dashboard's History view."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from fleetdeck.tui.fmt import host_text, human_bytes, human_duration, human_mib

SPARK = "▁▂▃▄▅▆▇█"
KINDS = ("gpu", "disk", "run", "eval", "host", "seat")
Series = dict[str, dict[str, list[tuple[int, float | None, float | None]]]]


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


def collect(hist: Any, host: str, since: float) -> Series:
    """{kind: {series name: [(t, a, b)...]}} of `host` since `since`, for the kinds shown."""
    return {kind: hist.series(host, kind, since) for kind in KINDS}


def history_table(data: Series, host: str, since: float, window: float, width: int) -> Table:
    """One row per series: its sparkline over the window on shared time buckets, on a fixed
    scale (GPU memory 0..its peak, utilisation 0..100%, disk use against the filesystem, a loss
    against its own range), with its first, last and peak figures."""
    t = Table(title=Text(f"{host}: the last {human_duration(window)}"), box=None, pad_edge=False)
    for col in ("series", "over time", "first", "last", "peak"):
        t.add_column(col, no_wrap=True, overflow="ellipsis")
    step = max(60, int(window // width) or 60)

    def grid(pts: list[tuple[int, float | None, float | None]], i: int) -> list[float | None]:
        cells: list[float | None] = [None] * width
        for ts, a, b in pts:
            v = (a, b)[i]
            k = min(width - 1, max(0, int((ts - since) // step)))
            if v is not None:
                cells[k] = v if cells[k] is None else max(cells[k], v)  # type: ignore[type-var]
        return cells

    def row(label: Text | str, cells: list[float | None], lo: float, hi: float, fmt: Any) -> None:
        vals = [v for v in cells if v is not None]
        if not vals:
            return
        t.add_row(label, Text(spark(cells, width, lo, hi), style="cyan"), fmt(vals[0]), fmt(vals[-1]),
                  fmt(max(vals)))

    for name, pts in sorted(data.get("gpu", {}).items()):
        idx = name.partition(":")[0]
        mem = grid(pts, 0)
        peak = max((v for v in mem if v is not None), default=0.0)
        row(Text(f"GPU{idx} memory"), mem, 0.0, max(peak, 1.0), human_mib)
        row(Text(f"GPU{idx} utilisation"), grid(pts, 1), 0.0, 100.0, lambda v: f"{v:.0f}%")
    for name, pts in sorted(data.get("disk", {}).items()):
        used, free = grid(pts, 0), grid(pts, 1)
        total = max((u + f for u, f in zip(used, free, strict=True) if u is not None and f is not None), default=0.0)
        row(Text.assemble("disk ", host_text(name)), used, 0.0, total or 1.0, human_bytes)
    for kind, label in (("run", "loss"), ("eval", "eval loss")):
        for name, pts in sorted(data.get(kind, {}).items()):
            cells = grid(pts, 1)
            vals = [v for v in cells if v is not None]
            if vals:
                row(Text.assemble(host_text(name.rsplit("/", 1)[-1]), f" {label}"), cells, min(vals), max(vals),
                    lambda v: f"{v:.4g}")
    for _name, pts in data.get("host", {}).items():
        row(Text("answered"), grid(pts, 0), 0.0, 1.0, lambda v: f"{100 * v:.0f}%")
    return t
