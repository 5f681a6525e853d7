"""An incident as text (rich only, no textual): one card's figure as a full-height plot over the
window, the events of the window marked on the same time axis under it, and each event listed
with its time. `fleetdeck history HOST --gpu N --plot` prints it; what it draws is
`backend/monitor/history/incident.py`'s `Incident`.

Each column is one cell of the window (the history's fold: memory and temperature by their peak,
utilisation and power by their mean), drawn in eighths of a row. A column with no row is blank;
one where the host answered none of its polls is marked `×` on the event lane. An event is
marked by its number (1-9, then a-z) in the column of its time; two in one column show `+`, and
so does each past the 35th, which the list below names only by count.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short
from fleetdeck.backend.monitor.history.incident import Incident
from fleetdeck.show.audit_text import describe
from fleetdeck.show.fmt import human_mib

EIGHTHS = " ▁▂▃▄▅▆▇█"
MARKS = "123456789abcdefghijklmnopqrstuvwxyz"
UNITS: dict[str, Callable[[float], str]] = {
    "memory": human_mib,
    "utilisation": lambda v: f"{v:.0f}%",
    "temperature": lambda v: f"{v:.0f}°C",
    "power": lambda v: f"{v:.0f}W",
}
AXIS_W = 8


def _top(inc: Incident) -> float:
    """The top of the plot's scale: utilisation 100 %, temperature its peak or 100 °C, memory
    and power their peak."""
    peak = inc.line.peak if inc.line else 0.0
    if inc.figure == "utilisation":
        return 100.0
    if inc.figure == "temperature":
        return max(peak, 100.0)
    return max(peak, 1.0)


def _clock(t: float, window: float) -> str:
    return time.strftime("%m-%d %H:%M" if window > 86400 else "%H:%M", time.localtime(t))


def incident_plot(inc: Incident, height: int = 16, title: str | None = None) -> Text:
    """The plot of `inc`, `height` rows tall (at least 4), its events under it."""
    height = max(4, height)
    fmt = UNITS[inc.figure]
    width = inc.width or 1
    window = inc.until - inc.since
    top = _top(inc)
    out = Text()
    what = f"seat {inc.series.split(':', 1)[1]}" if inc.gpu < 0 else f"GPU{inc.gpu}"
    head = title or f"{inc.host} {what} {inc.figure}, the last {duration_short(window)}"
    out.append(shown(head), style="bold")
    if inc.line:
        out.append(
            f"   first {fmt(inc.line.first)}  last {fmt(inc.line.last)}  peak {fmt(inc.line.peak)}"
        )
    else:
        out.append(f"   no {inc.figure} recorded in the window", style="dim")
    out.append("\n")
    cells = inc.line.cells if inc.line else [None] * width
    eighths = [
        None if v is None else max(0, min(height * 8, round(v / top * height * 8))) for v in cells
    ]
    for r in range(height):
        level = height - 1 - r
        label = (
            fmt(top)
            if r == 0
            else fmt(top / 2)
            if r == height // 2
            else fmt(0.0)
            if r == height - 1
            else ""
        )
        out.append(f"{label:>{AXIS_W}} ┤" if label else " " * AXIS_W + " │", style="dim")
        row = []
        for e in eighths:
            if e is None:
                row.append(" ")
            else:
                full, part = divmod(e, 8)
                row.append("█" if level < full else EIGHTHS[part] if level == full else " ")
        out.append("".join(row), style="cyan")
        out.append("\n")
    out.append(" " * AXIS_W + " └" + "─" * width + "\n", style="dim")
    drawn = inc.step * width  # the columns' own span: a column is `step` seconds from `since`
    start, end = _clock(inc.since, window), _clock(inc.since + drawn, window)
    mid = _clock(inc.since + drawn / 2, window)
    ticks = [" "] * width
    for pos, s in (
        (0, start),
        (max(0, width // 2 - len(mid) // 2), mid),
        (max(0, width - len(end)), end),
    ):
        if all(c == " " for c in ticks[pos : pos + len(s)]) and pos + len(s) <= width:
            ticks[pos : pos + len(s)] = list(s)
    out.append(" " * (AXIS_W + 2) + "".join(ticks) + "\n", style="dim")
    lane = [" "] * width
    for i in inc.down:
        if 0 <= i < width:
            lane[i] = "×"
    for n, ev in enumerate(inc.events):
        col = max(0, min(width - 1, int((ev.t - inc.since) // inc.step)))
        mark = MARKS[n] if n < len(MARKS) else "+"
        lane[col] = mark if lane[col] in (" ", "×") else "+"
    out.append(" " * (AXIS_W - 6) + "events  " + "".join(lane) + "\n", style="bold yellow")
    if inc.down:
        out.append(
            f"  × the host answered none of its polls ({len(inc.down)} of {width} columns)\n",
            style="dim",
        )
    for n, ev in enumerate(inc.events[: len(MARKS)]):
        mark = MARKS[n]
        out.append(f"  {mark} ", style="bold yellow")
        out.append(time.strftime("%m-%d %H:%M:%S", time.localtime(ev.t)) + "  ", style="dim")
        out.append(shown(ev.label), style="bold")
        text = ev.text if ev.escaped else shown(ev.text)
        if ev.record is not None:  # an action: its result word, then the Audit view's summary
            text += f": {describe(ev.record)[0]}"
        out.append(f"  {text}\n")
    if len(inc.events) > len(MARKS):
        out.append(
            f"  … {len(inc.events) - len(MARKS)} more, marked + on the lane (a shorter window lists them)\n",
            style="dim",
        )
    if not inc.events:
        out.append("  no events recorded in the window\n", style="dim")
    return out


__all__ = ["incident_plot"]
