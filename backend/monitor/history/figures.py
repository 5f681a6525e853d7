"""What each figure of the poll history is, how it folds, and its first, last and peak.

Every history row holds two figures `(a, b)`; what they are depends on the series' kind, and so
does how several of them fold into one: the polls of a minute into its row, ten minute rows into
one past `raw_hours`, and the rows under one chart cell into that cell. One rule for all three
(`FIGURES`), by what the figure answers:

- `last`: where it stands now. A loss, a step, disk use: read by its peak, a loss that fell
  from 3.007 to 2.435 within a fold reads 3.007, as if it had not moved.
- `max`: how high it got. GPU memory (an out-of-memory is a peak, not a mean), a card's
  temperature, a seat's restarts and memory.
- `mean`: a share of the time. GPU utilisation and power, the share of polls a host answered, latency:
  one busy minute in an idle hour is not a busy hour, and one answer is not an hour answered.

A series' `first`, `last` and `peak` over a window are never folded: the oldest recorded value,
the newest and the largest (`summarise`, `Tally` for rows that stream past, `Line` for the chart).

What is held is never the window's rows: the chart's cells and figures are worked out by SQLite
(`History.chart`, each cell from its rows' count, sum, largest and newest value: `cell`), and
`--json`'s figures are tallied chunk by chunk as the rows are written out (`Tally`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

#: per kind, its two figures `(a, b)`: (name in `--json`, how it folds)
FIGURES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "gpu": (("memory_mib", "max"), ("utilisation_pct", "mean")),
    # a card's health: how hot it got (a slowdown is a peak), the power it drew on average
    "gpuh": (("temperature_c", "max"), ("power_w", "mean")),
    "disk": (("used_bytes", "last"), ("free_bytes", "last")),
    "run": (("step", "last"), ("loss", "last")),
    "eval": (("step", "last"), ("loss", "last")),
    "host": (("answered", "mean"), ("latency_ms", "mean")),
    "seat": (("restarts", "max"), ("memory_mib", "max")),
}
#: a kind not listed (none is written today) keeps its newest value
DEFAULT = (("a", "last"), ("b", "last"))


def fold_of(kind: str, i: int) -> str:
    """How figure `i` (0: a, 1: b) of `kind` folds: 'last', 'max' or 'mean'."""
    return FIGURES.get(kind, DEFAULT)[i][1]


def fold_in(acc: float | None, v: float, how: str) -> float:
    """`v`, the next value (oldest first), folded into `acc` (None: nothing yet): a running
    newest, largest or sum. A mean is kept as a sum; `fold_out` divides it by the count."""
    if acc is None or how == "last":
        return v
    return max(acc, v) if how == "max" else acc + v


def fold_out(acc: float | None, n: int, how: str) -> float | None:
    """The folded value of `n` values whose running fold is `acc`."""
    return None if acc is None else acc / n if how == "mean" and n else acc


def cell(
    how: str, n: int, total: float | None, peak: float | None, newest: float | None
) -> float | None:
    """The fold of `n` values (oldest first) from their aggregates, as SQLite gives them for a
    chart cell: their sum, their largest and the newest; None when there are none. The same
    value `fold` gives over the values themselves."""
    if not n:
        return None
    return newest if how == "last" else peak if how == "max" else fold_out(total, n, how)


def fold(values: Iterable[float], how: str) -> float | None:
    """`values` (oldest first, no None) folded into one: the newest, the largest or the mean;
    None when there are none."""
    acc, n = None, 0
    for v in values:
        acc, n = fold_in(acc, v, how), n + 1
    return fold_out(acc, n, how)


@dataclass(frozen=True)
class Summary:
    """One figure of one series over a window, from its recorded rows, never from chart cells:
    `first` the oldest value, `last` the newest, `peak` the largest, each with its row's time,
    and how many rows held a value."""

    first: float
    first_t: int
    last: float
    last_t: int
    peak: float
    peak_t: int
    rows: int


@dataclass(frozen=True)
class Line:
    """One figure of one series over a window as the chart draws it (`History.chart`): `cells`,
    each the fold of the rows under it by the figure's kind (`cell`; None where no row holds the
    figure), and the window's `first` (the oldest value), `last` (the newest) and `peak` (the
    largest), with the times of the first and last, read from the rows, never from the cells;
    `rows` is how many rows held the figure."""

    cells: list[float | None]
    first: float
    first_t: int
    last: float
    last_t: int
    peak: float
    rows: int


class Tally:
    """The `Summary` of each figure of one series, built from its rows a chunk at a time (oldest
    first, as `History.stream` yields them): what is held is three (time, value) pairs and a
    count a figure, however many rows go past."""

    def __init__(self) -> None:
        # per figure: [(first_t, first), (last_t, last), (peak_t, peak), rows] or None
        self._s: list[list | None] = [None, None]

    def add(self, points: Iterable[tuple[int, float | None, float | None]]) -> None:
        """Count the next `points` (`(t, a, b)`, oldest first, each after those already counted)."""
        pts = points if isinstance(points, list) else list(points)
        for i in (0, 1):
            held = [(p[0], p[1 + i]) for p in pts if p[1 + i] is not None]
            if not held:
                continue
            top = max(held, key=itemgetter(1))  # the first of equal largest values: the oldest
            s = self._s[i]
            if s is None:
                self._s[i] = [held[0], held[-1], top, len(held)]
                continue
            s[1] = held[-1]
            s[3] += len(held)
            if top[1] > s[2][1]:
                s[2] = top

    def summary(self, i: int) -> Summary | None:
        """The `Summary` of figure `i` (0: a, 1: b) so far; None when no row held it."""
        s = self._s[i]
        if s is None:
            return None
        (first_t, first), (last_t, last), (peak_t, peak), n = s
        return Summary(
            first=first, first_t=first_t, last=last, last_t=last_t, peak=peak, peak_t=peak_t, rows=n
        )

    def figures(self, kind: str) -> dict[str, dict[str, object]]:
        """{figure name: {first, first_t, last, last_t, peak, peak_t, rows, fold}} for `--json`; a
        figure no row held is left out."""
        out: dict[str, dict[str, object]] = {}
        for i, (name, how) in enumerate(FIGURES.get(kind, DEFAULT)):
            s = self.summary(i)
            if s is not None:
                out[name] = {
                    "first": s.first,
                    "first_t": s.first_t,
                    "last": s.last,
                    "last_t": s.last_t,
                    "peak": s.peak,
                    "peak_t": s.peak_t,
                    "rows": s.rows,
                    "fold": how,
                }
        return out


def summarise(points: Iterable[tuple[int, float | None, float | None]], i: int) -> Summary | None:
    """The `Summary` of figure `i` (0: a, 1: b) over `points` (`(t, a, b)`, oldest first, as
    `History.series` returns them); None when no row holds that figure."""
    t = Tally()
    t.add(points)
    return t.summary(i)


def figures(
    kind: str, points: Iterable[tuple[int, float | None, float | None]]
) -> dict[str, dict[str, object]]:
    """{figure name: {first, first_t, last, last_t, peak, peak_t, rows, fold}} of one series, for
    `--json`; a figure no row holds is left out."""
    t = Tally()
    t.add(points)
    return t.figures(kind)


__all__ = [
    "DEFAULT",
    "FIGURES",
    "Line",
    "Summary",
    "Tally",
    "cell",
    "figures",
    "fold",
    "fold_in",
    "fold_of",
    "fold_out",
    "summarise",
]
