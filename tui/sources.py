"""Where the dashboard's snapshots come from: the `Source` it polls (the real `Poller` is one)
and `RecordedSource`, recorded `status --json` documents replayed as polls."""

from __future__ import annotations

from typing import Protocol

from fleetdeck.backend.fleet.models import FleetSnapshot


class Source(Protocol):
    """Where snapshots come from: the real `Poller`, or recorded snapshots in tests."""

    async def poll(self) -> FleetSnapshot:
        """One poll of the whole fleet; a down host is inside the snapshot, not an exception."""
        ...


class RecordedSource:
    """Replays recorded `status --json` documents as polls (the last one repeats).

    Used by the tests, the benchmarks and the screenshot scripts (there is no replay command):
    the snapshots reach the screens through the same `FleetPolled` path a live poll takes.
    """

    def __init__(self, snapshots: list[FleetSnapshot]) -> None:
        if not snapshots:
            raise ValueError("no recorded snapshots to replay")
        self.snapshots = list(snapshots)
        self._i = 0

    async def poll(self) -> FleetSnapshot:
        """The next recorded snapshot."""
        snap = self.snapshots[min(self._i, len(self.snapshots) - 1)]
        self._i += 1
        return snap
