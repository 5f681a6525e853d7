"""The monitor's seat rounds: seats the probe did not report, from the seat finder (at most once
a minute a host), and the periodic seat checks that `[alerts] seat_check_interval` asks for,
each verdict kept for the seat-check rule and written to history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.seats import SeatCheck, check_seat, fetch_seats, record_check

SEAT_REFRESH_S = 60.0


class SeatRounds:
    """What the seat finder last found per host, and when each seat was last checked.
    `warn` receives one sentence per failure; `event(t, host, kind, subject, text)` writes a
    check's verdict to history."""

    def __init__(self, warn: Callable[[str], None], event: Callable[..., None]) -> None:
        self.warn = warn
        self.event = event
        self._seats: dict[str, tuple[float, tuple[Seat, ...]]] = {}
        self._checked_at: dict[str, float] = {}

    async def with_seats(self, snap: FleetSnapshot, link: Callable[[str], Any]) -> FleetSnapshot:
        """Hosts whose probe did not look for seats get them from the seat finder, at most
        once a minute each (the probe, when it reports seats, is used as it is)."""
        now = time.time()
        due = [
            h
            for h in snap.hosts
            if h.reachable
            and h.seats is None
            and now - self._seats.get(h.name, (0.0, ()))[0] >= SEAT_REFRESH_S
        ]
        found = await asyncio.gather(
            *(fetch_seats(link(h.name)) for h in due), return_exceptions=True
        )
        for h, res in zip(due, found, strict=True):
            if isinstance(res, asyncio.CancelledError):
                raise res
            if not isinstance(res, BaseException):
                self._seats[h.name] = (now, tuple(res[0]))
        hosts = tuple(
            replace(h, seats=self._seats[h.name][1])
            if h.reachable and h.seats is None and h.name in self._seats
            else h
            for h in snap.hosts
        )
        return replace(snap, hosts=hosts)

    async def due_checks(
        self,
        snap: FleetSnapshot,
        every: float,
        check: Callable[[str, int], Awaitable[SeatCheck]],
    ) -> dict[str, SeatCheck]:
        """The seats of `snap` not checked for `every` seconds, each checked now by `check`."""
        now = time.time()
        todo = [
            (h.name, s.port)
            for h in snap.hosts
            if h.reachable
            for s in h.seats or ()
            if isinstance(s.port, int)
            and s.port
            and now - self._checked_at.get(f"{h.name}:{s.port}", 0.0) >= every
        ]
        out: dict[str, SeatCheck] = {}
        for host, port in dict.fromkeys(todo):
            self._checked_at[f"{host}:{port}"] = now
            try:
                c = await check(host, port)
            except Exception as e:  # the host went away between poll and check: next time
                self.warn(
                    f"seat check {host}:{port} did not run: {type(e).__name__}: {shown(str(e))[:200]}"
                )
                continue
            out[c.key] = c
        return out

    async def check(self, link: Any, host: str, port: int) -> SeatCheck:
        """Check one seat over `link` now; the verdict is kept for the seat-check rule and
        written to history; one that cannot be kept is a warning. Raises what
        `seats.check_seat` raises when the check cannot run."""
        c = await check_seat(link, port)
        try:
            record_check(c)
        except (OSError, ValueError, TypeError) as e:
            self.warn(
                f"seat check {host}:{port} not saved ({type(e).__name__}: {shown(str(e))}); "
                "its verdict counts for this run only"
            )
        self.event(
            c.checked_at,
            host,
            "seat-check",
            f"port {port}",
            "sound" if c.sound else f"{c.signature}: {c.message}",
        )
        return c


__all__ = ["SEAT_REFRESH_S", "SeatRounds"]
