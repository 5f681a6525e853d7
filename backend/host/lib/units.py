"""Sizes and durations as text: the one formatter for alerts, the audit log, launch estimates,
the CLI and the dashboard. Runs on the host's Python 3.8 too (the launch helper's estimates)."""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any


def _number(n: Any) -> float | None:
    """`n` as a finite float, or None (None, NaN, infinities, anything that is not a number)."""
    if n is None or isinstance(n, bool):
        return None
    try:
        n = float(n)
    except (TypeError, ValueError):
        return None
    return n if math.isfinite(n) else None


def size(n: object, unknown: str = "?") -> str:
    """Bytes in binary units with one decimal: 512 -> '512 B', 1536 -> '1.5 KiB',
    3 << 30 -> '3.0 GiB' (up to TiB). Sentences use it: alerts, estimates, the audit log."""
    n = _number(n)
    if n is None:
        return unknown
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return "%.0f %s" % (n, unit) if unit == "B" else "%.1f %s" % (n, unit)
        n /= 1024
    return "%.1f TiB" % n


def size_short(n: object, unknown: str = "?") -> str:
    """Bytes in at most four significant characters, for table cells: 1536 -> '1.5K'."""
    n = _number(n)
    if n is None:
        return unknown
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024:
            return "%.0f%s" % (n, unit) if unit == "B" or abs(n) >= 100 else "%.1f%s" % (n, unit)
        n /= 1024
    return "%.0fP" % n if abs(n) >= 100 else "%.1fP" % n


def duration_short(seconds: object, unknown: str = "?") -> str:
    """A span for table cells: 65 -> '1m05s', 7300 -> '2h01m', 90000 -> '1d01h'."""
    s = _number(seconds)
    if s is None or s < 0:
        return unknown
    s = int(s)
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    if s < 86400:
        return "%dh%02dm" % (s // 3600, s % 3600 // 60)
    return "%dd%02dh" % (s // 86400, s % 86400 // 3600)


def ago(seconds: object) -> str:
    """A span for sentences: 90 -> '90s', 600 -> '10 min', 9000 -> '2.5 h', 200000 -> '2.3 days'."""
    s = _number(seconds)
    s = max(0, int(s or 0))
    if s < 120:
        return "%ds" % s
    if s < 7200:
        return "%d min" % (s // 60)
    if s < 172800:
        return "%.1f h" % (s / 3600)
    return "%.1f days" % (s / 86400)
