"""Acknowledged schedules, and the fleet-wide verdict on which schedules are stray.

The acknowledged set lives in `$XDG_STATE_HOME/fleetdeck/acknowledged.json`:
`{"ids": [...], "hosts": {"h1": [...]}}`. An id under `hosts` is acknowledged on that host only
(`schedules ack ID`); one under `ids` on every host, now and later (`ack --all-hosts`; files
written before acknowledgements had hosts hold only these). Every change is a read-modify-write
under an exclusive `flock` on `acknowledged.lock`, so concurrent acknowledgements (two CLIs, the
dashboard) never lose one another's ids; the file itself is replaced atomically.

Ids are a kind letter, a dash and 32 hex digits. Files written before ids were widened hold
the legacy form, the first 12 characters (40 bits) of the same schedule's id today. A legacy id
still covers the one schedule in its scope whose id begins with it (never two: one of them
would be a forgery), and a stored one is rewritten to the full id the first time it resolves.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from fleetdeck.backend.fleet.models import HostSnapshot, Schedule
from fleetdeck.backend.fleet.statedir import state_dir

#: the reasons an acknowledgement clears: the operator has judged the entry
JUDGED = ("unacknowledged", "duplicate")
#: an id as written before ids were widened (40 bits; see the module docstring)
LEGACY_ID = re.compile(r"^[a-z]-[0-9a-f]{10}$")
#: an id as the probe writes it now (128 bits)
WIDE_ID = re.compile(r"^[a-z]-[0-9a-f]{32}$")


@dataclass(frozen=True)
class Acks:
    """What the operator has acknowledged."""

    #: ids acknowledged on every host
    everywhere: frozenset[str] = frozenset()
    #: (host, id) pairs acknowledged on that host only
    on_host: frozenset[tuple[str, str]] = frozenset()
    #: read from the file (so legacy ids that resolve may be rewritten there)
    stored: bool = field(default=False, compare=False)

    def covers(self, host: str, sid: str) -> bool:
        """True when schedule `sid` on `host` is acknowledged."""
        return sid in self.everywhere or (host, sid) in self.on_host

    def to_json(self) -> dict:
        """The file's content."""
        hosts: dict[str, list[str]] = {}
        for h, sid in sorted(self.on_host):
            hosts.setdefault(h, []).append(sid)
        return {"ids": sorted(self.everywhere), "hosts": hosts}


def acks_path() -> Path:
    """Where the acknowledged set is stored."""
    return state_dir() / "acknowledged.json"


def _parse(data: object) -> Acks:
    if not isinstance(data, dict):
        return Acks()
    everywhere = frozenset(str(x) for x in data.get("ids") or () if isinstance(x, str))
    hosts = data.get("hosts")
    if not isinstance(hosts, dict):
        hosts = {}
    on_host = frozenset(
        (str(h), str(x))
        for h, ids in hosts.items()
        if isinstance(ids, list)
        for x in ids
        if isinstance(x, str)
    )
    return Acks(everywhere, on_host, stored=True)


def load_acks() -> Acks:
    """The acknowledged set as stored now (empty when there is none or it cannot be read)."""
    try:
        return _parse(json.loads(acks_path().read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return Acks()


def _save(acks: Acks) -> None:
    path = acks_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(acks.to_json(), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def acknowledge(on_host: Iterable[tuple[str, str]] = (), everywhere: Iterable[str] = ()) -> Acks:
    """Add (host, id) pairs and every-host ids to the stored set; returns the set as saved.

    Holds an exclusive lock on `acknowledged.lock` from the read to the rename, so that of
    any number of concurrent calls, every id survives.
    """
    with open(state_dir() / "acknowledged.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cur = load_acks()
        new = Acks(cur.everywhere | frozenset(everywhere), cur.on_host | frozenset(on_host))
        if new != cur:
            _save(new)
        return new


def _widened(legacy: str, ids: Iterable[str]) -> str | None:
    """The one wide id among `ids` that legacy id `legacy` is the start of; None for none or
    several."""
    found = {i for i in ids if i.startswith(legacy) and WIDE_ID.match(i)}
    return found.pop() if len(found) == 1 else None


def resolve_legacy(acks: Acks, hosts: list[HostSnapshot]) -> Acks:
    """`acks` plus the full id of each legacy id that names exactly one schedule of `hosts`
    (on its host for a per-host id, anywhere for an every-host id). When `acks` came from the
    file, those legacy ids are rewritten there to the full ids, under the lock."""
    fleet = {s.id for h in hosts for s in h.schedules}
    per_host = {h.name: [s.id for s in h.schedules] for h in hosts}
    every = {
        old: new for old in acks.everywhere if LEGACY_ID.match(old) if (new := _widened(old, fleet))
    }
    local = {
        (h, old): (h, new)
        for h, old in acks.on_host
        if LEGACY_ID.match(old) and h in per_host
        if (new := _widened(old, per_host[h]))
    }
    if not every and not local:
        return acks
    if acks.stored:
        try:
            _migrate(every, local)
        except OSError:
            pass  # a read-only state folder: the legacy ids keep working, resolved each poll
    return Acks(
        acks.everywhere | frozenset(every.values()),
        acks.on_host | frozenset(local.values()),
        stored=acks.stored,
    )


def _migrate(every: dict[str, str], local: dict[tuple[str, str], tuple[str, str]]) -> None:
    with open(state_dir() / "acknowledged.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cur = load_acks()
        gone_every = {o for o in every if o in cur.everywhere}
        gone_local = {o for o in local if o in cur.on_host}
        if gone_every or gone_local:
            _save(
                Acks(
                    (cur.everywhere - gone_every) | {every[o] for o in gone_every},
                    (cur.on_host - gone_local) | {local[o] for o in gone_local},
                )
            )


# -- the verdict -------------------------------------------------------------------------------
def _norm(command: str) -> str:
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
    counts = Counter(
        _norm(s.command) for h in hosts for s in h.schedules if s.active and not s.system
    )
    out = []
    for h in hosts:
        if not h.schedules:
            out.append(h)
            continue
        scheds = []
        for s in h.schedules:
            if s.system:
                scheds.append(replace(s, reasons=(), stray=False))
                continue
            reasons = [r for r in s.reasons if r not in JUDGED]
            if not acks.covers(h.name, s.id):
                reasons.append("unacknowledged")
                if s.active and counts[_norm(s.command)] > 1:
                    reasons.append("duplicate")
            scheds.append(replace(s, reasons=tuple(reasons), stray=bool(reasons)))
        out.append(replace(h, schedules=tuple(scheds)))
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
            index.setdefault(_norm(o.command), []).append(o)
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
        key = _norm(s.command)
        pool = (
            index.get(key, [])
            if index is not None
            else (o for o in fleet if o.active and not o.system and _norm(o.command) == key)
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
    "Acks",
    "JUDGED",
    "LEGACY_ID",
    "WIDE_ID",
    "acknowledge",
    "action_rank",
    "acks_path",
    "load_acks",
    "mark_stray",
    "resolve_legacy",
    "stray_first",
    "why",
]
