"""Plain formatting shared by the CLI tables and the dashboard."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    """1536 -> '1.5K', binary units, '-' for unknown."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(n) < 1024 or unit == "P":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}P"


def human_mib(mib: float | None) -> str:
    """MiB figure as a human size."""
    return "-" if mib is None else human_bytes(mib * 1024 * 1024)


def human_seconds(s: float | None) -> str:
    """3725 -> '1h02m', '-' for unknown."""
    if s is None:
        return "-"
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


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
