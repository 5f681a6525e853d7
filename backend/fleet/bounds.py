"""Number ranges and names as the config files take them: one checker for the fleet file
(`config`, `alert_rules`) and RUN.toml (`train/runconfig`), each answer a sentence naming the
key and the value."""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass

from fleetdeck.backend.host.lib.text import shown

HOUR = 3600
DAY = 86400
WEEK = 7 * DAY


@dataclass(frozen=True)
class Bounds:
    """The documented range of one number key: an integer or any finite number, between `low`
    and `high` (inclusive unless `above` / `below`; None: no bound on that side)."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    #: `low` itself is out of range
    above: bool = False
    #: `high` itself is out of range
    below: bool = False
    #: what 0 means when it is taken although below `low` ("off"); None: 0 is not taken
    zero: str | None = None

    @property
    def kind(self) -> str:
        """What the key holds, in words: "an integer" or "a number"."""
        return "an integer" if self.integer else "a number"

    @property
    def words(self) -> str:
        """The range in words: "greater than 0 and below 1", "between 1 and 65535",
        "0 (off) or between 1 and 86400"..."""
        lo = (
            None
            if self.low is None
            else f"{'greater than' if self.above else 'at least'} {_plain(self.low)}"
        )
        hi = (
            None
            if self.high is None
            else f"{'below' if self.below else 'at most'} {_plain(self.high)}"
        )
        if self.low is not None and self.high is not None and not self.above and not self.below:
            text = f"between {_plain(self.low)} and {_plain(self.high)}"
        else:
            text = " and ".join(w for w in (lo, hi) if w) or "finite"
        return f"0 ({self.zero}) or {text}" if self.zero else text

    def takes(self, value: float) -> bool:
        """True when the finite number `value` is in range. A negative zero (`-0.0`) is taken
        only where negative numbers are: no one writes it for a count, a share or a duration."""
        if (
            value == 0
            and math.copysign(1.0, value) < 0
            and (self.zero or (self.low is not None and self.low >= 0))
        ):
            return False
        if value == 0 and self.zero:
            return True
        if self.low is not None and (value < self.low or (self.above and value == self.low)):
            return False
        return not (
            self.high is not None and (value > self.high or (self.below and value == self.high))
        )


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def toml_shown(value: object) -> str:
    """A value as TOML writes it, for a message: `true`, `inf`, `nan`, `"text"`; an integer too
    long to print whole is named by its size."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, int) and value.bit_length() > 64:
        try:
            digits = str(len(str(abs(value))))
        except ValueError:  # past Python's limit for printing an integer
            digits = "thousands of"
        return f"{'-' if value < 0 else ''}(an integer of {digits} digits)"
    return repr(value)


def number_problem(key: str, value: object, bounds: Bounds) -> str | None:
    """None when `value` is a number `bounds` allows; else the sentence saying why not, naming
    the key and the value (the caller puts the file and table in front). A boolean is never a
    number, NaN and the infinities (TOML's `nan`, `inf`, and `1e400` which TOML reads as inf)
    are never finite, and a float is never an integer."""
    shown_v = toml_shown(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (bounds.integer and not isinstance(value, int))
    ):
        return f"key {key!r} must be {bounds.kind}, not {shown_v}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key} = {shown_v} is not a finite number"
    if not bounds.takes(value):
        signed = (
            " (a signed zero is not taken: write 0)" if value == 0 and bounds.takes(0.0) else ""
        )
        return f"{key} = {shown_v} is out of range: key {key!r} must be {bounds.words}{signed}"
    return None


#: the characters no path, address, login or interpreter name holds: control characters (an
#: escape sequence starts with one), invisible format characters (zero-width, bidi overrides)
#: and the Unicode line and paragraph separators
_UNSEEN = ("Cc", "Cf", "Zl", "Zp")


def control_problem(key: str, value: str) -> str | None:
    """None when `value` holds no control character; else the sentence naming the key, the
    value (escaped, so the message itself carries none) and the first such character."""
    bad = next((ch for ch in value if unicodedata.category(ch) in _UNSEEN), None)
    if bad is None:
        return None
    text = shown(value)
    text = text if len(text) <= 120 else text[:120] + "..."
    return (
        f'key {key!r} must not hold control characters: "{text}" holds '
        f"{shown(bad) if bad.isascii() else f'U+{ord(bad):04X}'}"
    )


__all__ = ["DAY", "HOUR", "WEEK", "Bounds", "control_problem", "number_problem", "toml_shown"]
