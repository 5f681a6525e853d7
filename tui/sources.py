"""Where the dashboard's snapshots come from: the `Source` it polls (the real `Poller` is one)
and `RecordedSource`, recorded `status --json` documents replayed as polls."""

from __future__ import annotations

import json
from typing import Protocol

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.validate import fleet_from_json


class Source(Protocol):
    """Where snapshots come from: the real `Poller`, or recorded snapshots in tests."""

    async def poll(self) -> FleetSnapshot:
        """One poll of the whole fleet; a down host is inside the snapshot, not an exception."""
        ...


class RecordedSource:
    """Replays recorded `status --json` documents as polls (the last one repeats).

    Used by `fleetdeck tui --replay FILE` and by the tests: the snapshots reach the screens
    through the same `FleetPolled` path a live poll takes.
    """

    def __init__(self, snapshots: list[FleetSnapshot]) -> None:
        if not snapshots:
            raise ValueError("no recorded snapshots to replay")
        self.snapshots = list(snapshots)
        self._i = 0

    @classmethod
    def from_files(cls, *paths: str) -> RecordedSource:
        """Load each file as one poll, in order."""
        return cls([fleet_from_json(json.loads(open(p, encoding="utf-8").read())) for p in paths])

    async def poll(self) -> FleetSnapshot:
        """The next recorded snapshot."""
        snap = self.snapshots[min(self._i, len(self.snapshots) - 1)]
        self._i += 1
        return snap
