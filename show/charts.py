"""History as text: one sparkline line per recorded series of a host (rich only, no textual),
shared by `fleetdeck history` and the dashboard's History view. What a cell and each figure
column mean is `backend/monitor/history/figures.py`'s rule, the one the database folds by."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from fleetdeck.backend.host.lib.units import duration_short, size_short
from fleetdeck.backend.monitor.history.figures import Line, fold
from fleetdeck.show.cells import spark_char
from fleetdeck.show.fmt import host_text, human_mib

KINDS = ("gpu", "gpuh", "disk", "run", "eval", "host", "seat")
#: {kind: {series name: (figure a, figure b)}}, as `History.chart` gives it
Chart = dict[str, dict[str, tuple[Line | None, Line | None]]]


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
        out.append(spark_char(frac))
    return "".join(out)


def cell_seconds(window: float, width: int) -> int:
    """How long one chart cell of a `window` drawn `width` cells wide is, in seconds: a minute at
    least, the shortest row."""
    return max(60, int(window // width) or 60)


def collect(hist: Any, host: str, since: float, window: float, width: int) -> Chart:
    """{kind: {series name: (figure a, figure b)}} of `host` since `since`, for the kinds shown,
    as `width` cells over `window`: worked out by the database (`History.chart`), so what this
    holds is `width` values a figure, however many rows the window has."""
    data = hist.chart(host, since, cell_seconds(window, width), width)
    return {kind: data.get(kind, {}) for kind in KINDS}


def history_table(data: Chart, host: str, window: float, width: int) -> Table:
    """One row per series (`collect`'s, drawn `width` cells wide): its sparkline over the window
    on shared time buckets, on a fixed scale (GPU memory 0..its peak, utilisation 0..100%, a
    card's temperature 0..its peak or 100 °C, its power 0..its peak, disk use against the filesystem, a loss against its own range), each cell folding its rows as the
    figure's kind says (`FIGURES`: a loss or disk use by its newest value, GPU memory by its peak,
    utilisation and answers by their mean); then the figure's first (oldest recorded value of the
    window), last (newest) and peak (largest), read from the rows, never from the cells."""
    t = Table(title=Text(f"{host}: the last {duration_short(window)}"), box=None, pad_edge=False)
    for col in ("series", "over time", "first", "last", "peak"):
        t.add_column(col, no_wrap=True, overflow="ellipsis")

    def drawn(cells: list[float | None]) -> list[float]:
        return [v for v in cells if v is not None]

    def row(label: Text | str, line: Line | None, lo: float, hi: float, fmt: Any) -> None:
        if line is None:
            return
        t.add_row(
            label,
            Text(spark(line.cells, width, lo, hi), style="cyan"),
            fmt(line.first),
            fmt(line.last),
            fmt(line.peak),
        )

    for name, (mem, util) in data.get("gpu", {}).items():
        idx = name.partition(":")[0]
        peak = max(drawn(mem.cells), default=0.0) if mem else 0.0
        row(Text(f"GPU{idx} memory"), mem, 0.0, max(peak, 1.0), human_mib)
        row(Text(f"GPU{idx} utilisation"), util, 0.0, 100.0, lambda v: f"{v:.0f}%")
        # the card's health where the driver reports it: temperature on 0..its peak (at least
        # 100 °C), power on 0..its peak
        temp, power = data.get("gpuh", {}).get(name, (None, None))
        hot = max(drawn(temp.cells), default=0.0) if temp else 0.0
        row(Text(f"GPU{idx} temperature"), temp, 0.0, max(hot, 100.0), lambda v: f"{v:.0f}°C")
        watts = max(drawn(power.cells), default=0.0) if power else 0.0
        row(Text(f"GPU{idx} power"), power, 0.0, max(watts, 1.0), lambda v: f"{v:.0f}W")
    for name, (used, free) in data.get("disk", {}).items():
        total = (
            max(
                (
                    u + f
                    for u, f in zip(used.cells, free.cells, strict=True)
                    if u is not None and f is not None
                ),
                default=0.0,
            )
            if used and free
            else 0.0
        )
        row(Text.assemble("disk ", host_text(name)), used, 0.0, total or 1.0, size_short)
    for kind, label in (("run", "loss"), ("eval", "eval loss")):
        for name, (_, loss) in data.get(kind, {}).items():
            vals = drawn(loss.cells) if loss else []
            if vals:
                row(
                    Text.assemble(host_text(name.rsplit("/", 1)[-1]), f" {label}"),
                    loss,
                    min(vals),
                    max(vals),
                    lambda v: f"{v:.4g}",
                )
    for _name, (answered, _) in data.get("host", {}).items():
        row(Text("answered"), answered, 0.0, 1.0, lambda v: f"{100 * v:.0f}%")
    return t
