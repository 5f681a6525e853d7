"""`fleetdeck watch`: the poller without a screen, for a controller that runs unattended.

Each cycle: one poll of the fleet (the dashboard's poller), seats where the probe did not report
them, due seat checks, one history row set, the alert rules, each transition delivered once to
the `[alerts]` hooks and printed as one line, the engine's state saved (so a restart neither
forgets nor repeats an alert), and the Prometheus collector updated. The next poll starts
`poll_interval` after one ends; SIGTERM or SIGINT ends the loop after the current cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from dataclasses import replace
from typing import Any, TextIO

from fleetdeck.backend.alerts import AlertConfig, AlertEngine, Notifier, load_engine, save_engine
from fleetdeck.backend.config import Fleet, load_fleet
from fleetdeck.backend.history import History
from fleetdeck.backend.models import FleetSnapshot
from fleetdeck.backend.seats import (
    Seat,
    SeatCheck,
    check_seat,
    fetch_seats,
    record_check,
    recorded_checks,
)

SEAT_REFRESH_S = 60.0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `watch [--prometheus ADDR:PORT] [--count N]`."""
    from fleetdeck.tui.cli import add_hosts_option, at_least_one, seconds_type

    p = sub.add_parser("watch", help="poll headless: history, alerts and hooks (and Prometheus)",
                       description="Poll the fleet every poll_interval without a screen, keep history, "
                       "judge the alert rules and deliver each transition once to the [alerts] hooks.")
    add_hosts_option(p)
    p.add_argument("--prometheus", metavar="ADDR:PORT", help="serve /metrics here (e.g. 127.0.0.1:9464)")
    p.add_argument("--count", type=at_least_one, metavar="N", help="stop after N polls (default: run until stopped)")
    p.add_argument("--interval", type=seconds_type("above 0", lambda v: v > 0), metavar="SECONDS", help="seconds between polls "
                   "(default: the fleet file's poll_interval)")
    p.set_defaults(func=cmd_watch)


class Watcher:
    """One poll loop with history, alerts, hooks and an optional metrics collector."""

    def __init__(self, fleet: Fleet, *, history: History | None = None, engine: AlertEngine | None = None,
                 collector: Any = None, out: TextIO | None = None, readonly: bool = False) -> None:
        from fleetdeck.backend.poller import Poller

        self.fleet = fleet
        self.config: AlertConfig = fleet.alerts or AlertConfig()  # type: ignore[assignment]
        self.poller = Poller(fleet)
        self.history = history if history is not None else History(retention_days=self.config.history_retention_days)
        self.engine = engine if engine is not None else load_engine(self.config)
        self.notifier = Notifier(self.config)
        self.collector = collector
        self.out = out or sys.stdout
        #: judge only: no history row, no hook, no saved state (what `fleetdeck alerts` does)
        self.readonly = readonly
        self.polls = 0
        self._seats: dict[str, tuple[float, tuple[Seat, ...]]] = {}
        self._checked_at: dict[str, float] = {}
        self._preload()

    def _preload(self) -> None:
        # disk-full-eta judges a rate over a window: start with the window history already has
        since = time.time() - self.config.disk_rate_window
        for h in self.fleet.hosts:
            for path, pts in self.history.series(h.name, "disk", since).items():
                for t, used, free in pts:
                    if used is not None and free is not None:
                        self.engine.add_disk_sample(h.name, path, t, int(used), int(free))

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    async def cycle(self) -> FleetSnapshot:
        """One poll with everything that follows it; the snapshot, seats included."""
        snap = await self.poller.poll()
        snap = await self._with_seats(snap)
        checks = {**recorded_checks(), **await self._due_checks(snap)}
        if self.readonly:
            self.engine.evaluate(snap, checks)
            self.polls += 1
            return snap
        self.history.record(snap)
        transitions = self.engine.evaluate(snap, checks)
        if self.collector is not None:   # a scrape agrees with the hooks from the moment they run
            self.collector.update(snap, self.engine.firing(), checks)
        for a in transitions:
            self.history.event(a.since, a.host, f"alert-{a.state}", f"{a.rule} {a.subject}", a.text)
            self.say(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {a.title}: {a.text}")
        for w in await self.notifier.deliver(transitions) + self.history.warnings:
            self.say(f"warning: {w}")
        self.history.warnings.clear()
        try:
            save_engine(self.engine)
        except OSError as e:
            self.say(f"warning: alert state not saved: {e}")
        self.polls += 1
        return snap

    async def _with_seats(self, snap: FleetSnapshot) -> FleetSnapshot:
        """Hosts whose probe did not look for seats get them from the seat finder, at most
        once a minute each (the probe, when it reports seats, is used as it is)."""
        now = time.time()
        due = [h for h in snap.hosts if h.reachable and h.seats is None
               and now - self._seats.get(h.name, (0.0, ()))[0] >= SEAT_REFRESH_S]
        found = await asyncio.gather(*(fetch_seats(self.poller.link(h.name)) for h in due),
                                     return_exceptions=True)
        for h, res in zip(due, found, strict=True):
            if not isinstance(res, BaseException):
                self._seats[h.name] = (now, tuple(res[0]))
        hosts = tuple(replace(h, seats=self._seats[h.name][1])
                      if h.reachable and h.seats is None and h.name in self._seats else h for h in snap.hosts)
        return replace(snap, hosts=hosts)

    async def _due_checks(self, snap: FleetSnapshot) -> dict[str, SeatCheck]:
        every = self.config.seat_check_interval
        if not every or self.readonly:
            return {}
        now = time.time()
        todo = [(h.name, s.port) for h in snap.hosts if h.reachable for s in h.seats or ()
                if s.port and now - self._checked_at.get(f"{h.name}:{s.port}", 0.0) >= every]
        out: dict[str, SeatCheck] = {}
        for host, port in dict.fromkeys(todo):
            self._checked_at[f"{host}:{port}"] = now
            try:
                c = await check_seat(self.poller.link(host), port)
            except Exception as e:  # the host went away between poll and check: next time
                self.say(f"warning: seat check {host}:{port} did not run: {e}")
                continue
            out[c.key] = c
            record_check(c)
            self.history.event(c.checked_at, host, "seat-check", f"port {port}",
                               "sound" if c.sound else f"{c.signature}: {c.message}")
        return out

    async def run(self, count: int | None = None, interval: float | None = None,
                  stop: asyncio.Event | None = None) -> None:
        """Poll until `count` polls are done or `stop` is set."""
        stop = stop or asyncio.Event()
        interval = interval or self.fleet.poll_interval
        try:
            while not stop.is_set():
                await self.cycle()
                if count is not None and self.polls >= count:
                    break
                try:
                    await asyncio.wait_for(stop.wait(), interval)
                except TimeoutError:
                    pass
        finally:
            await self.poller.close()
            self.history.close()


def cmd_watch(args: argparse.Namespace) -> int:
    """Run the headless poller until stopped (or for --count polls)."""
    fleet = load_fleet(args.hosts)
    collector = None
    if args.prometheus:
        from fleetdeck.backend.export import FleetCollector, parse_listen, serve_metrics

        try:
            addr, port = parse_listen(args.prometheus)
        except ValueError as e:
            print(f"fleetdeck: {e}", file=sys.stderr)
            return 2
        collector = FleetCollector()
        try:
            _server, bound = serve_metrics(addr, port, collector)
        except OSError as e:
            print(f"fleetdeck: cannot serve metrics on {args.prometheus}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"metrics on http://{addr}:{bound}/metrics", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        watcher = Watcher(fleet, collector=collector)
        print(f"watching {len(fleet.hosts)} host(s) from {fleet.source}; history in {watcher.history.path}",
              flush=True)
        await watcher.run(args.count, args.interval, stop)

    asyncio.run(main())
    return 0
