"""A run's series as an SVG drawn on the server: training loss as a line, eval loss as points on
a second line, the step on the x axis. No script and no style attribute: the stylesheet colours
it by class, so the page's Content-Security-Policy holds for the chart too."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: the drawing's size in its own units (it scales to the page's width)
WIDTH, HEIGHT = 640, 260
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 12, 28
#: the most points drawn of one series (a longer one is thinned evenly, its last point kept)
POINTS_MAX = 600


def _finite(series: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for s, v in series:
        try:
            x, y = float(s), float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            out.append((x, y))
    return out


def thinned(
    points: list[tuple[float, float]], limit: int = POINTS_MAX
) -> list[tuple[float, float]]:
    """At most `limit` of `points`, evenly spaced, first and last kept."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def _label(v: float) -> str:
    return f"{v:.4g}"


def loss_chart(
    losses: Sequence[tuple[float, float]], evals: Sequence[tuple[float, float]], title: str
) -> str:
    """The SVG (a string of markup with no host text in it but `title`, which the caller
    escaped); an empty string when neither series has a finite point."""
    train, ev = thinned(_finite(losses)), thinned(_finite(evals))
    every = train + ev
    if not every:
        return ""
    x0, x1 = min(p[0] for p in every), max(p[0] for p in every)
    y0, y1 = min(p[1] for p in every), max(p[1] for p in every)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    w, h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def xy(p: tuple[float, float]) -> str:
        return (
            f"{PAD_L + (p[0] - x0) / (x1 - x0) * w:.1f},{PAD_T + (y1 - p[1]) / (y1 - y0) * h:.1f}"
        )

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{title}</title>",
        f'<rect class="frame" x="{PAD_L}" y="{PAD_T}" width="{w}" height="{h}"/>',
        f'<text class="axis" x="{PAD_L - 4}" y="{PAD_T + 10}" text-anchor="end">{_label(y1)}</text>',
        f'<text class="axis" x="{PAD_L - 4}" y="{PAD_T + h}" text-anchor="end">{_label(y0)}</text>',
        f'<text class="axis" x="{PAD_L}" y="{HEIGHT - 8}">step {x0:.0f}</text>',
        f'<text class="axis" x="{WIDTH - PAD_R}" y="{HEIGHT - 8}" text-anchor="end">'
        f"step {x1:.0f}</text>",
    ]
    if train:
        parts.append(f'<polyline class="loss" points="{" ".join(map(xy, train))}"/>')
    if ev:
        parts.append(f'<polyline class="eval" points="{" ".join(map(xy, ev))}"/>')
        parts += [
            f'<circle class="eval" cx="{c.split(",")[0]}" cy="{c.split(",")[1]}" r="3"/>'
            for c in map(xy, ev[-POINTS_MAX // 10 :])
        ]
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["POINTS_MAX", "loss_chart", "thinned"]
