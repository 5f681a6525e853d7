"""The sort order of a table column: numbers (sizes with their unit, percentages) before text,
text in natural order (`run-3` before `run-10`)."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

from fleetdeck.backend.fleet.run_order import natural_key


def plain(cell: Any) -> str:
    """A cell's text, without styles."""
    return cell.plain if isinstance(cell, Text) else str(cell)


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "%": 1}
_NUM = re.compile(r"^\s*([-+]?[0-9]+(?:\.[0-9]+)?)\s*([BKMGTP%]?)\b")


def sort_key(cell: Any) -> tuple[int, float, tuple]:
    """Numbers (sizes with their unit, percentages) before text, each in its natural order (a
    number inside text, as in `run-10`, compares as a number: `run_order.natural_key`)."""
    text = plain(cell).strip()
    m = _NUM.match(text)
    if m:
        return (0, float(m.group(1)) * _UNITS.get(m.group(2), 1), natural_key(text))
    return (1, 0.0, natural_key(text))
