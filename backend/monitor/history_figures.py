"""What each figure of the poll history is, how it folds, and its first, last and peak.

Every history row holds two figures `(a, b)`; what they are depends on the series' kind, and so
does how several of them fold into one: the polls of a minute into its row, ten minute rows into
one past `raw_hours`, and the rows under one chart cell into that cell. One rule for all three
(`FIGURES`), by what the figure answers:

- `last`: where it stands now. A loss, a step, disk use: read by its peak, a loss that fell
  from 3.007 to 2.435 within a fold reads 3.007, as if it had not moved.
- `max`: how high it got. GPU memory (an out-of-memory is a peak, not a mean), a seat's
  restarts and memory.
- `mean`: a share of the time. GPU utilisation, the share of polls a host answered, latency:
  one busy minute in an idle hour is not a busy hour, and one answer is not an hour answered.

A series' `first`, `last` and `peak` over a window are never folded: the oldest recorded value,
the newest and the largest (`summarise`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: per kind, its two figures `(a, b)`: (name in `--json`, how it folds)
FIGURES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "gpu": (("memory_mib", "max"), ("utilisation_pct", "mean")),
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


def summarise(points: Iterable[tuple[int, float | None, float | None]], i: int) -> Summary | None:
    """The `Summary` of figure `i` (0: a, 1: b) over `points` (`(t, a, b)`, oldest first, as
    `History.series` returns them), in one pass; None when no row holds that figure."""
    first = last = peak = None
    n = 0
    for p in points:
        v = p[1 + i]
        if v is None:
            continue
        n += 1
        if first is None:
            first = (p[0], v)
        last = (p[0], v)
        if peak is None or v > peak[1]:
            peak = (p[0], v)
    if first is None or last is None or peak is None:
        return None
    return Summary(first=first[1], first_t=first[0], last=last[1], last_t=last[0], peak=peak[1],
                   peak_t=peak[0], rows=n)


def figures(kind: str, points: Sequence[tuple[int, float | None, float | None]]) -> dict[str, dict[str, object]]:
    """{figure name: {first, first_t, last, last_t, peak, peak_t, rows, fold}} of one series, for
    `--json`; a figure no row holds is left out."""
    out: dict[str, dict[str, object]] = {}
    for i, (name, how) in enumerate(FIGURES.get(kind, DEFAULT)):
        s = summarise(points, i)
        if s is not None:
            out[name] = {"first": s.first, "first_t": s.first_t, "last": s.last, "last_t": s.last_t,
                         "peak": s.peak, "peak_t": s.peak_t, "rows": s.rows, "fold": how}
    return out


__all__ = ["DEFAULT", "FIGURES", "Summary", "figures", "fold", "fold_in", "fold_of", "fold_out", "summarise"]
