"""Acknowledged schedules: the operator's record of which schedules are known and wanted.

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fleetdeck.backend.fleet.models import HostSnapshot
from fleetdeck.backend.fleet.statedir import read_file, state_dir

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
        return _parse(json.loads(read_file(acks_path()).decode("utf-8")))
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


__all__ = [
    "Acks",
    "LEGACY_ID",
    "WIDE_ID",
    "acknowledge",
    "acks_path",
    "load_acks",
    "resolve_legacy",
]
