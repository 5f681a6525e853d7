"""What the `fleetdeck schedules` commands share: one fresh poll of the fleet, the hosts
`--host` names, the hosts that did not answer, and a reason sentence as it may be printed."""

from __future__ import annotations

import asyncio

from fleetdeck.backend.fleet.config import Fleet
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.poller import poll_fleet
from fleetdeck.backend.host.lib.text import shown


def poll(fleet: Fleet, names: list[str] | None) -> FleetSnapshot:
    """One fresh poll of these hosts (all when None); stray and reasons already decided."""
    return asyncio.run(poll_fleet(fleet, hosts=names))


def host_names(fleet: Fleet, wanted: list[str] | None) -> list[str] | None:
    """The hosts `--host` named, each once (None: all); a name the fleet lacks exits 2."""
    if not wanted:
        return None
    for n in wanted:
        fleet.host(n)  # ConfigError (exit 2) for a host the fleet file does not name
    return list(dict.fromkeys(wanted))


def sentence(msg: str | None) -> str:
    """A reason sentence as it may be printed. The backend builds them with every untrusted
    part already escaped by `shown`, so a printable one is printed as it is (escaping it again
    would double its backslashes); anything else is escaped whole."""
    if msg is None:
        return ""
    return msg if msg.isprintable() else shown(msg)


def unreachable(snap: FleetSnapshot) -> list[tuple[str, str, str | None]]:
    """(host, error, error code) of each host the poll could not ask."""
    return [
        (h.name, h.error or "unknown error", h.error_code) for h in snap.hosts if not h.reachable
    ]
