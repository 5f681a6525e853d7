"""The helpers this controller started on a connection of their own (a mirror's reader and
writer), by (pid, start ticks) as the helper itself reported them: the probe of the same host is
told of them (`"ours"` in its request), since they do not descend from its session. An entry
outlives its process harmlessly (a pid and start time are never reused together); at most
`LIMIT` are kept per host, oldest dropped first."""

from __future__ import annotations

from typing import Any

LIMIT = 256
_KNOWN: dict[str, dict[tuple[int, int], None]] = {}


def add(host: str, ident: Any) -> None:
    """Record `ident` ((pid, start), as a helper reported it) as ours on `host`; anything that
    is not two whole numbers is ignored."""
    if not (isinstance(ident, (tuple, list)) and len(ident) == 2):
        return
    pid, start = ident
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (pid, start)):
        return
    seen = _KNOWN.setdefault(host, {})
    seen.pop((pid, start), None)
    seen[(pid, start)] = None
    while len(seen) > LIMIT:
        del seen[next(iter(seen))]


def known(host: str) -> list[list[int]]:
    """[[pid, start], ...] recorded for `host`, oldest first."""
    return [[p, s] for p, s in _KNOWN.get(host, {})]


__all__ = ["LIMIT", "add", "known"]
