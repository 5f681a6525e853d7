"""The sort order of a table column: numbers (sizes with their unit, percentages, spans of time)
before text, text in natural order (`run-3` before `run-10`)."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

from fleetdeck.backend.fleet.run_order import natural_key


def plain(cell: Any) -> str:
    """A cell's text, without styles."""
    return cell.plain if isinstance(cell, Text) else str(cell)


_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "M": 1 << 20,
    "G": 1 << 30,
    "T": 1 << 40,
    "P": 1 << 50,
    "%": 1,
}
_NUM = re.compile(r"^\s*([-+]?[0-9]+(?:\.[0-9]+)?)\s*([BKMGTP%]?)\b")


_SPAN_UNITS = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "d": 86400,
    "days": 86400,
    "day": 86400,
}
#: spans as the tables write them (`units.duration_short`, `units.ago`, the latency column):
#: 41ms, 11.5s, 1m05s, 2h01m, 1d01h, 10 min, 2.5 h, 2.3 days, with or without `in ` / ` ago`
_SPAN = re.compile(
    r"^(?:in )?([0-9]+(?:\.[0-9]+)?) ?(ms|s|min|m|h|days|day|d)"
    r"(?:([0-9]+)(s|m|h))?(?: ago)?$"
)


def span_seconds(text: str) -> float | None:
    """The seconds a span cell stands for, or None when it is not one."""
    m = _SPAN.match(text)
    if not m:
        return None
    total = float(m.group(1)) * _SPAN_UNITS[m.group(2)]
    if m.group(3):
        total += int(m.group(3)) * _SPAN_UNITS[m.group(4)]
    return total


def sort_key(cell: Any) -> tuple[int, float, tuple]:
    """Numbers (sizes with their unit, percentages) before text, each in its natural order (a
    number inside text, as in `run-10`, compares as a number: `run_order.natural_key`)."""
    text = plain(cell).strip()
    span = span_seconds(text)
    if span is not None:
        return (0, span, natural_key(text))
    m = _NUM.match(text)
    if m:
        return (0, float(m.group(1)) * _UNITS.get(m.group(2), 1), natural_key(text))
    return (1, 0.0, natural_key(text))
