"""Messages of the dashboard, named in the past tense: what happened, not what to do."""

from __future__ import annotations

from textual.message import Message

from fleetdeck.backend.fleet.models import FleetSnapshot


class FleetPolled(Message):
    """A poll of the fleet finished; the one path by which snapshots reach the screens."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        """A newer poll supersedes one the screens have not drawn yet."""
        return isinstance(message, FleetPolled)


class PollFailed(Message):
    """A poll of the whole fleet raised (not one host down: that is inside the snapshot)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ActionFinished(Message):
    """A purge, mirror, removal, acknowledgement or launch ended; screens re-read state."""

    def __init__(self, action: str, host: str | None, ok: bool, summary: str) -> None:
        super().__init__()
        self.action = action
        self.host = host
        self.ok = ok
        self.summary = summary
