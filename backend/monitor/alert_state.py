"""Reading the monitor's saved state strictly: a file past its size limit, a file that is not
a JSON object, and each entry that is malformed (a wrong type, a non-finite time or count) are
quarantined, moved aside under `$XDG_STATE_HOME/fleetdeck/quarantine/` with a warning naming
where they went, and everything else loads. Only the deliverer (the `watch` holding the state
folder's lock) moves anything; a reader (the dashboard, `fleetdeck alerts`) skips what is bad.

The limits are documented in docs/seats-alerts.md ("Saved state"): `STATE_LIMIT` for
`alerts.json`, `outbox.JOURNAL_LIMIT` for the outbox journal.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.host.lib.text import shown

#: `alerts.json` larger than this is not read at all: it is moved aside whole (the engine's
#: state is a few hundred bytes an alert; 16 MiB is tens of thousands of firing alerts)
STATE_LIMIT = 16 * 2**20
#: the largest count a saved entry may hold (attempts, restarts)
COUNT_LIMIT = 10**9


@dataclass(frozen=True)
class Reject:
    """One entry that did not load: where it was, why, and what it held."""

    where: str
    why: str
    value: Any = None


def quarantine_dir() -> Path:
    """Where quarantined files and entries are kept (created on demand)."""
    d = statedir.state_dir() / "quarantine"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"


def _free(path: Path) -> Path:
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}.{n}")
    return out


def move_aside(path: Path) -> Path:
    """Move `path` into the quarantine folder; the new path."""
    dest = _free(quarantine_dir() / f"{path.name}.{_stamp()}")
    os.replace(path, dest)
    return dest


def keep_rejects(name: str, rejects: list[Reject]) -> Path:
    """Write the rejected entries of `name` to one file in the quarantine folder; its path."""
    dest = _free(quarantine_dir() / f"{name}.entries.{_stamp()}.json")
    doc = [{"where": r.where, "why": r.why, "value": r.value} for r in rejects]
    # ensure_ascii and allow_nan: what was read is kept as it was, NaN and lone surrogates included
    dest.write_text(json.dumps(doc, ensure_ascii=True, indent=1, default=repr), encoding="ascii")
    return dest


def read_doc(
    path: Path, *, move: bool, limit: int = STATE_LIMIT
) -> tuple[dict[str, Any], list[str]]:
    """The JSON object saved at `path` ({} when there is none), and warnings. A file past
    `limit` is never read; it and a file that is not a JSON object are moved aside when `move`
    (the deliverer), left where they are otherwise."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return {}, []
    except OSError as e:
        return {}, [
            f"{shown(str(path))} could not be read ({e.strerror or e}); starting without it"
        ]
    why = None
    doc: Any = None
    if size > limit:
        why = f"it is {size} bytes, past the {limit}-byte limit"
    else:
        try:
            raw = statedir.read_file(path, limit + 1)
            if len(raw) > limit:
                why = f"it grew past the {limit}-byte limit"
            else:
                doc = json.loads(raw.decode("utf-8"))
                if not isinstance(doc, dict):
                    why = f"it holds a JSON {type(doc).__name__}, not an object"
        except OSError as e:
            return {}, [
                f"{shown(str(path))} could not be read ({e.strerror or e}); starting without it"
            ]
        except (ValueError, RecursionError) as e:
            why = f"it is not JSON ({shown(str(e))[:120]})"
    if why is None:
        return doc, []
    if not move:
        return {}, [f"{shown(str(path))} is not used: {why}"]
    try:
        dest = move_aside(path)
    except OSError as e:
        return {}, [
            f"{shown(str(path))} is not used ({why}) and could not be moved aside "
            f"({e.strerror or e}); starting without it"
        ]
    return {}, [
        f"{shown(str(path))} was quarantined ({why}): moved to {shown(str(dest))}; starting without it"
    ]


def report_rejects(name: str, rejects: list[Reject], *, move: bool) -> list[str]:
    """One warning for the entries of `name` that did not load (kept in the quarantine folder
    when `move`)."""
    if not rejects:
        return []
    first = rejects[0]
    what = f"{len(rejects)} entr{'y' if len(rejects) == 1 else 'ies'} of {name} did not load (first: {first.where}: {first.why})"
    if not move:
        return [f"{what}; skipped"]
    try:
        dest = keep_rejects(name, rejects)
    except (OSError, ValueError, TypeError) as e:
        return [f"{what}; skipped (not kept: {shown(str(e))})"]
    return [f"{what}; quarantined in {shown(str(dest))}"]


# -- the checks each entry goes through -----------------------------------------------------------
class Bad(ValueError):
    """An entry that does not hold what it must (the message says which field and why)."""


def finite(v: Any, what: str) -> float:
    """A finite number (a bool, a string, NaN or an infinity is Bad)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad(f"{what} is not a number ({_brief(v)})")
    try:
        f = float(v)
    except OverflowError:
        raise Bad(f"{what} is not a finite number") from None
    if not math.isfinite(f):
        raise Bad(f"{what} is not a finite number ({_brief(v)})")
    return f


def count(v: Any, what: str) -> int:
    """A whole number from 0 to COUNT_LIMIT."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad(f"{what} is not a whole number ({_brief(v)})")
    if not 0 <= v <= COUNT_LIMIT:
        raise Bad(f"{what} is out of range ({_brief(v)})")
    return v


def text(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise Bad(f"{what} is not a string ({_brief(v)})")
    return v


def table(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Bad(f"{what} is not an object ({_brief(v)})")
    return v


def items(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list):
        raise Bad(f"{what} is not a list ({_brief(v)})")
    return v


def _brief(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


__all__ = [
    "Bad",
    "COUNT_LIMIT",
    "Reject",
    "STATE_LIMIT",
    "count",
    "finite",
    "items",
    "keep_rejects",
    "move_aside",
    "quarantine_dir",
    "read_doc",
    "report_rejects",
    "table",
    "text",
]
