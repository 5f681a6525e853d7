"""Small text renderers for table cells: bars, sparklines, sizes, ages and a loss chart.

They return Rich `Text` so a cell can be compared and updated without building widgets, which
keeps a poll of 50 hosts x 8 GPUs cheap to apply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.style import Style
from rich.text import Span, Text

from fleetdeck.backend.fleet.gpu_health import SLOWDOWN, hot_margin, throttle_mark
from fleetdeck.backend.fleet.models import Gpu

SPARK = "▁▂▃▄▅▆▇█"
FULL, EMPTY = "█", "░"


def level_style(frac: float) -> str:
    """Green below 70 %, yellow below 90 %, red above: readable in light and dark themes."""
    if frac >= 0.9:
        return "bold red"
    if frac >= 0.7:
        return "yellow"
    return "green"


def bar(frac: float | None, width: int = 10, dim: bool = False) -> Text:
    """A horizontal bar `████░░░░` for a 0..1 fraction; `?` bars when unknown."""
    if frac is None or math.isnan(frac):
        return Text("?" * width, style="dim")
    frac = min(max(frac, 0.0), 1.0)
    filled = int(round(frac * width))
    t = Text()
    t.append(FULL * filled, style="dim" if dim else level_style(frac))
    t.append(EMPTY * (width - filled), style="dim")
    return t


def spark_char(frac: float) -> str:
    """One sparkline character for a 0..1 fraction (clamped): the one quantiser of every
    sparkline, the table cells' and the history charts'."""
    top = len(SPARK) - 1
    return SPARK[min(top, max(0, int(frac * top + 0.5)))]


def middle(path: str, width: int) -> str:
    """`path` cut in the middle when too long: its head (up to its first folder, at most a
    third of the room) says where it lives, its tail, the larger part, which folder it is
    (`/srv/fleet/h1/runs` in 12: `/sr…t/h1/runs`)."""
    if len(path) <= width:
        return path
    if width < 5:
        return tail(path, width)
    first = path.find("/", 1) + 1 or len(path)
    head = min(first, (width - 1) // 3)
    return path[:head] + "…" + path[-(width - 1 - head) :]


def tail(path: str, width: int) -> str:
    """`path` cut from the left when too long: the end of a path is the part that differs."""
    return path if len(path) <= width else "…" + path[-max(1, width - 1) :]


def progress(step: int | None, max_steps: int | None, width: int = 10) -> Text:
    """`███░░░ 42/159` for a run; just the step when the total is unknown."""
    if step is None:
        return Text("-", style="dim")
    if not max_steps:
        return Text(f"step {step}")
    t = bar(step / max_steps, width)
    # the bar in blue: each of its spans with blue over it, as `stylize("blue")` gives, but as
    # spans side by side (the table draws those directly, overlapping ones through Rich)
    spans, pos = [], 0
    for sp in t.spans:
        if sp.start > pos:
            spans.append(Span(pos, sp.start, "blue"))
        spans.append(
            Span(
                sp.start,
                sp.end,
                f"{sp.style} blue" if isinstance(sp.style, str) else sp.style + Style.parse("blue"),
            )
        )
        pos = sp.end
    if pos < len(t):
        spans.append(Span(pos, len(t), "blue"))
    t.spans = spans
    t.append(f" {step}/{max_steps}")
    return t


def axis_labels(hi: float, lo: float) -> tuple[str, str]:
    """Both ends of an axis with the same number of decimals (`1.95` and `1.00`, not `1`),
    as many as 4 significant digits need for either."""
    a, b = f"{hi:.4g}", f"{lo:.4g}"
    if "e" in a + b or "n" in a + b:  # tiny, huge or not a number: as they are
        return a, b
    d = max(len(x.partition(".")[2]) for x in (a, b))
    return f"{hi:.{d}f}", f"{lo:.{d}f}"


def loss_chart(
    losses: Sequence[tuple[int, float]],
    evals: Sequence[tuple[int, float]],
    width: int = 60,
    height: int = 8,
) -> Text:
    """A plot of training loss (·) and eval loss (●) against step, y-axis labelled.

    Both series share one y scale so the eval points sit on the curve they belong to, and the
    axis labels carry the real range: a plateau reads as flat at its own scale.
    """
    pts = list(losses) + list(evals)
    if not pts:
        return Text("no loss recorded yet", style="dim")
    lo = min(v for _, v in pts)
    hi = max(v for _, v in pts)
    if hi - lo < 1e-12:
        hi, lo = lo + 0.5, lo - 0.5
    s_lo = min(s for s, _ in pts)
    s_hi = max(s for s, _ in pts)
    s_span = (s_hi - s_lo) or 1
    grid = [[" "] * width for _ in range(height)]
    styles = [[""] * width for _ in range(height)]

    def place(series: Sequence[tuple[int, float]], ch: str, style: str) -> None:
        for s, v in series:
            x = int((s - s_lo) / s_span * (width - 1) + 0.5)
            y = height - 1 - int((v - lo) / (hi - lo) * (height - 1) + 0.5)
            grid[y][x] = ch
            styles[y][x] = style

    place(losses, "·", "blue")
    place(evals, "●", "magenta")
    out = Text()
    top, bottom = axis_labels(hi, lo)
    for row in range(height):
        if row == 0:
            label = f"{top:>8} ┤"
        elif row == height - 1:
            label = f"{bottom:>8} ┤"
        else:
            label = " " * 8 + " │"
        out.append(label, style="dim")
        for x in range(width):
            out.append(grid[row][x], style=styles[row][x] or None)
        out.append("\n")
    out.append(" " * 9 + "└" + "─" * width + "\n", style="dim")
    left, right = f"step {s_lo}", f"step {s_hi}"
    out.append(" " * 10 + left + " " * max(1, width - len(left) - len(right)) + right, style="dim")
    # the legend is 20 wide: on a narrow chart it starts left of the plot rather than overflow
    out.append("\n" + " " * max(0, min(10, width - 10)))
    out.append("· loss", style="blue")
    out.append("   ")
    out.append("● eval loss", style="magenta")
    # a chart a little too wide for its pane loses its right edge; wrapped, it is garbage
    out.no_wrap, out.overflow = True, "crop"
    return out


def eval_trend(evals: Sequence[tuple[int, float]], last: int = 6) -> Text:
    """The last eval losses as numbers with their change, and a verdict on the trend.

    `plateau` when the last three evals moved less than 0.5 % in all: the case an operator once
    read as "still descending" from a single last value.
    """
    if not evals:
        return Text("eval loss: none yet", style="dim")
    tail = list(evals)[-last:]
    t = Text("eval loss: ")
    if len(evals) > len(tail):
        # the series goes further back than is shown: said, never passed off as all of it
        t.append(f"… {len(evals) - len(tail)} earlier  ", style="dim")
    prev = None
    for s, v in tail:
        t.append(f"{v:.4f}", style="bold")
        t.append(f"@{s}", style="dim")
        if prev is not None:
            d = v - prev
            t.append(f" ({d:+.4f})", style="green" if d < 0 else "red" if d > 0 else "dim")
        t.append("  ")
        prev = v
    if len(evals) >= 3:
        a, b = evals[-3][1], evals[-1][1]
        change = (b - a) / a if a else 0.0
        if abs(change) < 0.005:
            t.append(f"→ plateau ({change:+.2%} over last 3 evals)", style="bold yellow")
        elif change < 0:
            t.append(f"→ descending ({change:+.2%} over last 3)", style="green")
        else:
            t.append(f"→ rising ({change:+.2%} over last 3)", style="bold red")
    return t


#: the Fleet row's word for each marked throttle reason (gpu_health.MARKED)
MARK_WORDS = {
    "hw-thermal-slowdown": "thermal",
    "sw-thermal-slowdown": "thermal",
    "hw-power-brake-slowdown": "power brake",
    "hw-slowdown": "hw slowdown",
    "sw-power-cap": "power cap",
}


def temp_style(g: Gpu) -> str | None:
    """Red within 5 °C of the slowdown threshold, yellow within 15, else plain."""
    margin = hot_margin(g)
    return (
        None
        if margin is None
        else "bold red"
        if margin <= 5
        else "yellow"
        if margin <= 15
        else None
    )


def gpu_health_parts(g: Gpu, room: int) -> tuple[list[tuple[str, str | None]], int]:
    """What the Fleet row shows of a card's health in `room` characters, as (text, style)
    pieces, and the room left for the sparkline: temperature and power (`61° 350W`, or the
    temperature alone when narrow; nothing the driver does not report), then a throttle mark
    `▼thermal` with its reason in words while throttled (only `▼` when there is no room)."""
    parts: list[tuple[str, str | None]] = []
    temp = None if g.temperature_c is None else f"{g.temperature_c}°"
    power = None if g.power_w is None else f"{g.power_w:.0f}W"
    both = " ".join(x for x in (temp, power) if x)
    if both and room - len(both) - 1 >= 4:
        if temp:
            parts.append((temp, temp_style(g)))
        if power:
            parts.append((" " + power if temp else power, None))
        parts.append((" ", None))
        room -= len(both) + 1
    elif temp and room - len(temp) - 1 >= 4:
        parts += [(temp, temp_style(g)), (" ", None)]
        room -= len(temp) + 1
    reason = throttle_mark(g)
    if reason is not None:
        style = "bold red" if reason in SLOWDOWN else "yellow"
        mark = "▼" + MARK_WORDS.get(reason, reason)
        if len(mark) > room:
            mark = "▼"
        parts.append((mark, style))
        room -= len(mark)
        if room > 0:
            parts.append((" ", None))
            room -= 1
    return parts, max(0, room)


class TextBuilder:
    """Builds one multi-line Text from (string, style) pieces with spans computed directly.

    The fleet table renders hundreds of small pieces per poll; this is several times cheaper
    than `Text.append` / `Text.join`, which copy and re-offset spans at every step.
    """

    __slots__ = ("parts", "spans", "pos")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[Span] = []
        self.pos = 0

    def add(self, s: str, style: str | None = None) -> TextBuilder:
        """Append `s` in `style`."""
        if s:
            if style:
                self.spans.append(Span(self.pos, self.pos + len(s), style))
            self.parts.append(s)
            self.pos += len(s)
        return self

    def bar(self, frac: float | None, width: int, dim: bool = False) -> TextBuilder:
        """Append a bar like `bar()` does."""
        if frac is None or frac != frac:
            return self.add("?" * width, "dim")
        filled = int(round(min(max(frac, 0.0), 1.0) * width))
        self.add(FULL * filled, "dim" if dim else level_style(frac))
        return self.add(EMPTY * (width - filled), "dim")

    def spark(self, chars: Sequence[str], width: int, dim: bool = False) -> TextBuilder:
        """Append the last `width` sparkline characters (see `spark_char`), right-aligned."""
        s = "".join(chars)[-width:]
        return self.add(" " * (width - len(s)) + s, "dim" if dim else "cyan")

    def build(self) -> Text:
        """The Text, one line per '\\n', cut with an ellipsis rather than wrapped."""
        return Text("".join(self.parts), spans=self.spans, no_wrap=True, overflow="ellipsis")


def folded(text: str, width: int) -> str:
    """`text` whole, in lines of at most `width` characters, each broken after a space, `-`,
    `_`, `/` or `.` where one falls in its second half (a name never loses a character)."""
    width = max(1, width)
    lines = []
    while len(text) > width:
        cut = max(text.rfind(c, 0, width) for c in " -_/.") + 1
        n = cut if cut > width // 2 else width
        lines.append(text[:n])
        text = text[n:]
    return "\n".join([*lines, text])
