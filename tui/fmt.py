"""Plain formatting shared by the CLI tables and the dashboard."""

from __future__ import annotations

import math


def human_bytes(n: float | None, unknown: str = "?") -> str:
    """1536 -> '1.5K'; binary units, at most 4 significant characters."""
    if n is None:
        return unknown
    n = float(n)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(n) < 1024 or unit == "P":
            return f"{n:.0f}{unit}" if unit == "B" or abs(n) >= 100 else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.0f}P"


def human_mib(mib: float | None) -> str:
    """MiB figure as a human size."""
    return human_bytes(None if mib is None else mib * 1024 * 1024, "-")


def human_duration(seconds: float | None, unknown: str = "?") -> str:
    """65 -> '1m05s', 7300 -> '2h01m'."""
    if seconds is None or seconds < 0 or math.isnan(seconds):
        return unknown
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def escape_path(p: str) -> str:
    """A path shown so that control characters (a newline...) cannot disguise it."""
    if p.isprintable():
        return p
    return repr(p)[1:-1]


def progress_text(step: int | None, max_steps: int | None) -> str:
    """'120/159 (75%)' or what is known of it."""
    if step is None:
        return "-"
    if not max_steps:
        return str(step)
    return f"{step}/{max_steps} ({100 * step / max_steps:.0f}%)"
