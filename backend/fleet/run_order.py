"""The one order runs are listed in: live runs first, then by host (in fleet-file order), then by
name in natural order (`run-3` before `run-10`), then by path."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetdeck.backend.fleet.models import Run

#: the states of a run whose trainer is at work (stalled: at work and silent)
LIVE = ("running", "stalled")
_DIGITS = re.compile(r"([0-9]+)")


@functools.lru_cache(maxsize=1 << 16)
def natural_key(text: str) -> tuple:
    """A sort key for `text` in which a run of digits compares as the number it is (`run-3`
    before `run-10`, however many digits: compared by length, never converted), letters
    without regard to case, and exact text last, so that no two different texts tie. Kept for
    the texts seen last (a poll lists the same hosts, names and paths again: the dashboard
    sorted 3,000 runs a poll by working each key out afresh)."""
    parts = _DIGITS.split(text)
    key: list = []
    for i, part in enumerate(parts):
        if i % 2:
            n = part.lstrip("0")
            key.append((len(n), n))
        else:
            key.append(part.casefold())
    return tuple(key), text


def ordered_runs(runs: Iterable[Run], hosts: Sequence[str] = ()) -> list[Run]:
    """`runs` live first, then by host (its place in `hosts`, the fleet file's order; a host not
    named there after the others, by name), then by name and path in natural order."""
    rank = {h: i for i, h in enumerate(hosts)}

    def key(r: Run) -> tuple:
        return (
            r.state not in LIVE,
            rank.get(r.host, len(rank)),
            natural_key(r.host),
            natural_key(r.name),
            natural_key(r.path),
        )

    return sorted(runs, key=key)
