"""Where the poller's resident probes come from: what a probe must answer to (`ResidentProbe`,
which `link.channel.HelperProcess` is) and the callable that opens one for a host (`OpenProbe`).
The poller's default opens the real one over the host's SSH link; a benchmark hands it a host
that replays recorded answers (`benchmarks/watch_big.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fleetdeck.backend.fleet.config import HostConfig


class ResidentProbe(Protocol):
    """One host's resident probe as the poller talks to it: a request out, one answer back."""

    async def send_json(self, obj: Any) -> None: ...

    async def recv_json(self) -> Any: ...

    async def read_stderr(self) -> str:
        """What it said on stderr as it ended (why its channel closed)."""
        ...

    def close(self) -> None: ...

    async def wait(self, timeout: float | None = None) -> int | None: ...


#: opens host's resident probe, its source already sent; raises HostError (or the link's own
#: errors) when it cannot. Called when the poller holds no probe for the host: at its first
#: poll, and after a probe was dropped (a timeout, a closed channel)
OpenProbe = Callable[[HostConfig], Awaitable[ResidentProbe]]

__all__ = ["OpenProbe", "ResidentProbe"]
