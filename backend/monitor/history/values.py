"""The two rules every value a host sends passes through on its way into the history database,
one for text (`sql_text`) and one for numbers (`sql_number`), and the times a row is written at
and read from (`row_time`, `read_since`); docs/probe.md ("Sinks") says why.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

#: the longest text written, in characters (a path is at most 4096 bytes on Linux)
TEXT_MAX = 4096
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    o = ord(m.group())
    return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else "\\x00" if o == 0 else f"\\u{o:04x}"


def sql_text(v: Any) -> str:
    """Any host string as text SQLite stores and compares whole: valid UTF-8 (a byte that was
    not UTF-8, kept as a surrogate by surrogateescape, becomes `\\xNN`; another lone surrogate
    `\\uDXXX`), no NUL (`\\x00`: SQLite's string functions stop at it), at most `TEXT_MAX`
    characters (a longer one keeps its head and a hash of the whole, so two stay two).
    Ordinary text is unchanged, so a path reads back as the poll reported it."""
    s = "" if v is None else v if isinstance(v, str) else str(v)
    s = _UNSAFE.sub(_escape, s)
    if len(s) > TEXT_MAX:
        s = s[: TEXT_MAX - 17] + "..." + hashlib.sha256(s.encode()).hexdigest()[:14]
    return s


def sql_number(v: Any) -> float | None:
    """Any host number as a REAL SQLite can hold: a finite float, else None (NULL). An integer
    past a float's range (10**400), NaN, infinities, booleans and non-numbers are NULL; a large
    integer within range (2**70) is its float."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def row_time(*times: Any) -> int:
    """The first of `times` that is an epoch second above 0 and below 2**53, as an int; else 0
    (the times are the controller's, so 0 is a test's clock, not a host's lie)."""
    for v in times:
        f = sql_number(v)
        if f is not None and 0 < f < 2**53:
            return int(f)
    return 0


def read_since(v: Any) -> int:
    """A read's lower time bound as an int SQLite can bind: clamped to 0..2**53 (NaN: 0)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v <= 0:
        return 0
    return 2**53 if v >= 2**53 else int(v)


__all__ = ["TEXT_MAX", "read_since", "row_time", "sql_number", "sql_text"]
