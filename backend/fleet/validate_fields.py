"""The checks of one field of a host's answer: each value typed and bounded, or `BadField`
naming the field and saying why (its bad value `described`: type and a short escaped form).
`Item` reads one item's optional fields softly, noting what failed; validate.py and
validate_gpu.py build the snapshots from these."""

from __future__ import annotations

import math
import re
from typing import Any

from fleetdeck.backend.host.lib.text import shown

#: what one answer may hold of each kind of item (the rest is left out, with a warning)
MAX_ITEMS = {
    "gpus": 64,
    "processes": 1024,
    "disks": 256,
    "runs": 5000,
    "schedules": 5000,
    "checkpoints": 1000,
    "warnings": 200,
    "seats": 256,
    "series": 100_000,
}
#: the longest text kept from a host in one field (longer is cut, ending in "…")
MAX_TEXT = 4096
MAX_COUNT = 10**15  # steps, pids, job numbers: any real one is far below
MAX_BYTES = 2**63 - 1  # byte figures: what a signed 64-bit column holds
MAX_FIGURE = 1e15  # losses, seconds, MiB: any real one is far below


class BadField(ValueError):
    """One field of one host item failed its check."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def described(v: Any) -> str:
    """A bad value as a warning shows it: its type and a short, escaped form."""
    text = shown(repr(v))
    return f"{type(v).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def as_text(v: Any, field: str, optional: bool = False, limit: int = MAX_TEXT) -> str | None:
    """Text, cut to `limit` characters (ending in "…"); None for None when `optional`."""
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise BadField(field, f"not text ({described(v)})")
    return v if len(v) <= limit else v[: limit - 1] + "…"


def as_number(v: Any, field: str, lo: float, hi: float, integer: bool) -> float | int | None:
    """None for None; a bool, a non-number, a non-finite float, a float where an integer is
    meant or a value outside [lo, hi] raises BadField."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadField(field, f"not a number ({described(v)})")
    if isinstance(v, float):
        if not math.isfinite(v):
            raise BadField(field, f"not finite ({v})")
        if integer:
            if not v.is_integer():
                raise BadField(field, f"not a whole number ({v})")
            v = int(v)
    if not lo <= v <= hi:
        raise BadField(field, f"out of range ({described(v)})")
    return v if integer else float(v)


def as_count(v: Any, field: str, hi: int = MAX_COUNT) -> int | None:
    """A whole number from 0 to `hi`, or None."""
    return as_number(v, field, 0, hi, True)  # type: ignore[return-value]


def as_figure(v: Any, field: str, lo: float = -MAX_FIGURE, hi: float = MAX_FIGURE) -> float | None:
    """A finite number from `lo` to `hi` as a float, or None."""
    return as_number(v, field, lo, hi, False)


class Item:
    """Reads one host item: a bad optional field becomes None and is noted (`marks`)."""

    def __init__(self, d: Any, kind: str) -> None:
        if not isinstance(d, dict):
            raise BadField(kind, f"not an object ({described(d)})")
        self.d = d
        self.marks: list[str] = []

    def soft(self, fn: Any, key: str, *args: Any) -> Any:
        """`fn(item[key], key, *args)`; None, noted in `marks`, when it fails."""
        try:
            return fn(self.d.get(key), key, *args)
        except BadField as e:
            self.marks.append(str(e))
            return None


def checked_series(v: Any, field: str, marks: list[str]) -> tuple[tuple[int, float], ...]:
    """[[step, value]...]: each bad point is dropped (counted in `marks`), the rest kept."""
    if v is None:
        return ()
    if not isinstance(v, list):
        marks.append(f"{field}: not a list ({described(v)})")
        return ()
    out = []
    bad = 0
    for pt in v[: MAX_ITEMS["series"]]:
        try:
            if not isinstance(pt, (list, tuple)) or len(pt) != 2:
                raise BadField(field, "not a [step, value] pair")
            step, val = as_count(pt[0], field), as_figure(pt[1], field)
            if step is None or val is None:
                raise BadField(field, "null")
            out.append((step, val))
        except BadField:
            bad += 1
    if bad:
        marks.append(f"{field}: {bad} bad point{'s' if bad != 1 else ''} dropped")
    if len(v) > MAX_ITEMS["series"]:
        marks.append(
            f"{field}: {len(v) - MAX_ITEMS['series']} points past {MAX_ITEMS['series']} left out"
        )
    return tuple(out)


def as_whole(v: Any, field: str, lo: int, hi: int) -> int | None:
    """A whole number from `lo` to `hi`, or None."""
    return as_number(v, field, lo, hi, True)  # type: ignore[return-value]


def as_flag(v: Any, field: str) -> bool | None:
    """True, false or None."""
    if v is None or isinstance(v, bool):
        return v
    raise BadField(field, f"not true, false or null ({described(v)})")


def as_label(v: Any, field: str, optional: bool = False, limit: int = MAX_TEXT) -> str | None:
    """Text that is only ever shown, never acted on (a GPU's name, its compute and ECC modes,
    a throttle reason, the driver's words for a lost card), made safe here, once, at the
    boundary: escaped as `shown` writes it, so no view, pop-up, alert or copy meets its raw
    bytes. Names and paths that an action takes back to the host stay raw in the model and are
    escaped where they are shown (they must reach the host as they are)."""
    t = as_text(v, field, optional, limit)
    return None if t is None else shown(t)


_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[ntr])")
_NAMED = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


def _unescaped(m: re.Match[str]) -> str:
    code = m.group(1)
    if code in _NAMED:
        return _NAMED[code]
    o = int(code[1:], 16)
    if code[0] == "x" and o >= 0x80 and chr(o).isprintable():
        return chr(0xDC00 + o)  # `shown` writes a printable \xNN only for an undecodable byte
    return chr(o)


def unshown(t: str) -> str:
    """Text as it was before `shown` escaped it, as far as `shown` writes the same again:
    `shown(unshown(s)) == s` for every `s` that `shown` wrote. What `status --json` printed of
    a label (`as_label`) is read back through this, so it is not escaped a second time, while
    a raw control character in the document is still escaped."""
    return t if "\\" not in t else _ESCAPE.sub(_unescaped, t)


def as_words(v: Any, field: str, limit: int = 64) -> tuple[str, ...] | None:
    """A list of up to 32 words of up to `limit` characters, or None; each made safe as
    `as_label` does."""
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > 32:
        raise BadField(field, f"not a list of up to 32 words ({described(v)})")
    return tuple(as_label(w, field, limit=limit) for w in v)  # type: ignore[misc]


def sub_fields(d: Any, key: str, fields: dict[str, tuple], marks: list[str]) -> dict[str, Any]:
    """The checked fields of the object at `key` (pcie, ecc); a field that fails is None."""
    sub = d.get(key)
    if sub is None:
        return {}
    if not isinstance(sub, dict):
        marks.append(f"{key}: not an object ({described(sub)})")
        return {}
    it = Item(sub, key)
    out = {k: it.soft(fn, k, *args) for k, (fn, *args) in fields.items()}
    marks.extend(f"{key}.{m}" for m in it.marks)
    return out


__all__ = [
    "MAX_BYTES",
    "MAX_COUNT",
    "MAX_FIGURE",
    "MAX_ITEMS",
    "MAX_TEXT",
    "BadField",
    "as_label",
    "Item",
    "as_count",
    "as_figure",
    "as_flag",
    "as_number",
    "as_text",
    "as_whole",
    "as_words",
    "checked_series",
    "described",
    "sub_fields",
    "unshown",
]
