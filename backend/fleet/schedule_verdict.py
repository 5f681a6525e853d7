"""The fleet-wide verdict on which schedules are stray, and how the listings explain it.

What the operator has acknowledged is read from `backend/fleet/acks.py`; a schedule is judged
against the whole fleet at once (a duplicate is a duplicate across hosts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from fleetdeck.backend.fleet.acks import LEGACY_ID, Acks, load_acks, resolve_legacy
from fleetdeck.backend.fleet.models import HostSnapshot, Schedule, judged_host, judged_schedule

#: the reasons an acknowledgement clears: the operator has judged the entry
JUDGED = ("unacknowledged", "duplicate")


def norm_command(command: str) -> str:
    """A schedule's command with its whitespace runs as one space: how two are told the same."""
    return " ".join(command.split())


def mark_stray(hosts: list[HostSnapshot], acks: Acks | None = None) -> list[HostSnapshot]:
    """Decide `stray` for every schedule of the fleet at once.

    - an entry the distribution installed (`system`) is never stray and carries no reason;
    - `duplicate`: the same command (whitespace aside) is scheduled, active, more than once
      across these hosts (system entries aside);
    - `unacknowledged`: the operator has not acknowledged it on its host;
    - an acknowledged entry loses both; the host-local reasons the probe found (`dead-target`)
      stay, because acknowledging does not make a missing path exist.
    The same hosts give the same verdict whichever of them the caller shows. Legacy ids in
    `acks` count as `resolve_legacy` says.
    """
    acks = resolve_legacy(load_acks() if acks is None else acks, hosts)
    counts: Counter[str] = Counter()
    for h in hosts:
        counts.update(_commands(h.schedules))
    return [judged_host(h, _judged(h, acks, counts)) if h.schedules else h for h in hosts]


def _commands(schedules: tuple[Schedule, ...]) -> Counter[str]:
    """How often each command (whitespace aside) is scheduled, active, among `schedules`."""
    return Counter(norm_command(s.command) for s in schedules if s.active and not s.system)


def _judged(h: HostSnapshot, acks: Acks, counts: Counter[str]) -> tuple[Schedule, ...]:
    """Host `h`'s schedules judged (see mark_stray), `counts` the fleet's `_commands`."""
    scheds = []
    for s in h.schedules:
        if s.system:
            scheds.append(judged_schedule(s, (), False))
            continue
        reasons = [r for r in s.reasons if r not in JUDGED]
        if not acks.covers(h.name, s.id):
            reasons.append("unacknowledged")
            if s.active and counts[norm_command(s.command)] > 1:
                reasons.append("duplicate")
        scheds.append(judged_schedule(s, tuple(reasons), bool(reasons)))
    return tuple(scheds)


class StrayVerdict:
    """`mark_stray` for a poller, kept between polls, host by host: a host whose schedules are
    the very tuple of the last call (a delta answer reuses an unchanged section's) keeps its
    judged schedules and its commands' counts, as long as the acknowledged set is equal and
    none of its commands went from once to more than once in the fleet or back. A host whose
    schedules changed is counted and judged again; another acknowledged set judges every host
    again, and one holding legacy ids (resolved against the whole fleet) is left to
    `mark_stray` at every call."""

    def __init__(self) -> None:
        self._acks: Acks | None = None
        self._legacy = False
        self._counts: Counter[str] = Counter()
        #: host -> (its schedules as given, their commands' counts, as judged) at the last call
        self._last: dict[str, tuple[tuple[Schedule, ...], Counter[str], tuple[Schedule, ...]]] = {}

    def __call__(self, hosts: list[HostSnapshot], acks: Acks | None = None) -> list[HostSnapshot]:
        acks = load_acks() if acks is None else acks
        if acks != self._acks:
            self._acks, self._last, self._counts = acks, {}, Counter()
            self._legacy = any(
                LEGACY_ID.match(i) for i in (*acks.everywhere, *(i for _, i in acks.on_host))
            )
        if self._legacy:
            return mark_stray(hosts, acks)
        last, before = self._last, self._counts
        if len(hosts) == len(last) and all(
            h.name in last and last[h.name][0] is h.schedules for h in hosts
        ):  # nothing changed: the last verdict, not even counted again
            return [judged_host(h, last[h.name][2]) if h.schedules else h for h in hosts]
        own: dict[str, Counter[str]] = {}
        counts: Counter[str] = Counter()
        for h in hosts:
            was = last.get(h.name)
            own[h.name] = was[1] if was and was[0] is h.schedules else _commands(h.schedules)
            counts.update(own[h.name])
        kept, out = {}, []
        for h in hosts:
            was = last.get(h.name)
            if (
                was
                and was[0] is h.schedules
                and all((counts[k] > 1) == (before[k] > 1) for k in own[h.name])
            ):
                judged = was[2]
            else:
                judged = _judged(h, acks, counts)
            kept[h.name] = (h.schedules, own[h.name], judged)
            out.append(judged_host(h, judged) if h.schedules else h)
        self._last, self._counts = kept, counts
        return out


def action_rank(s: Schedule) -> int:
    """Sort key: what needs action first. 0 a dead target, 1 a duplicated loop, 2 any other
    duplicate, 3 merely unacknowledged, 4 not stray, 5 installed by the distribution."""
    if s.system:
        return 5
    if not s.stray:
        return 4
    if "dead-target" in s.reasons:
        return 0
    if "duplicate" in s.reasons:
        return 1 if s.kind == "loop" else 2
    return 3


def twins_index(fleet: Iterable[Schedule]) -> dict[str, list[Schedule]]:
    """The active, non-system schedules of `fleet` by their command (whitespace aside): what
    `why` looks duplicates up in, built once for a whole listing instead of once per row."""
    index: dict[str, list[Schedule]] = {}
    for o in fleet:
        if o.active and not o.system:
            index.setdefault(norm_command(o.command), []).append(o)
    return index


def why(
    s: Schedule, fleet: Iterable[Schedule], index: dict[str, list[Schedule]] | None = None
) -> str:
    """One line saying why `s` is stray (or why it is not), for the CLI and the dashboard
    (`index`: `twins_index(fleet)`, for a caller that asks for many rows)."""
    if s.system:
        return "installed by the distribution"
    if not s.stray:
        return "acknowledged"
    parts = []
    if "dead-target" in s.reasons:
        miss = list(s.missing_paths)
        parts.append(
            f"names {miss[0]}, which does not exist on {s.host}"
            + (f" (and {len(miss) - 1} more)" if len(miss) > 1 else "")
            if miss
            else f"names a path that does not exist on {s.host}"
        )
    if "duplicate" in s.reasons:
        key = norm_command(s.command)
        pool = (
            index.get(key, [])
            if index is not None
            else (o for o in fleet if o.active and not o.system and norm_command(o.command) == key)
        )
        twins = [o for o in pool if o is not s]
        where = sorted({o.host for o in twins})
        n = len(twins)
        parts.append(
            f"the same command runs {n} more time{'s' if n != 1 else ''}"
            + (f" (on {', '.join(where)})" if where else "")
        )
    other = [r for r in s.reasons if r not in ("dead-target", "duplicate", "unacknowledged")]
    parts += other
    if "unacknowledged" in s.reasons and not parts:
        parts.append("nobody has acknowledged it")
    return "; ".join(parts)


def stray_first(schedules: Iterable[Schedule]) -> list[Schedule]:
    """Schedules sorted: what needs action first, then host, kind and id."""
    return sorted(schedules, key=lambda s: (action_rank(s), s.host, s.kind, s.id))


__all__ = [
    "JUDGED",
    "StrayVerdict",
    "action_rank",
    "mark_stray",
    "stray_first",
    "twins_index",
    "why",
]
