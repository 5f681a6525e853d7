"""The monitor: what `fleetdeck watch` does, as one service that `watch`, the dashboard and
`fleetdeck alerts` each run in their own role.

One cycle: a poll of the fleet, seats where the probe did not report them, due seat checks, a
history row set, the alert rules, the transitions queued for delivery, the alert state and the
outbox saved together (one atomic write, so after a crash a transition is either judged and
queued, or neither), and the metrics collector updated. Delivery runs beside the cycles
(`deliver.Deliverer`), so a slow hook never delays a poll.

Roles:
- `deliver` (`watch`): holds the state folder's lock (`watch_lock.StateLock`), delivers hooks, runs the
  periodic seat checks and saves the alert state and outbox after every cycle and every
  delivery.
- `observe` (the dashboard): judges the same rules carrying on from the saved state, writes
  history, delivers nothing and saves no alert state. The one deliverer is the `watch` that
  holds the lock; a dashboard beside it can never deliver a transition again.
- `judge` (`fleetdeck alerts`): judges once; no history, no delivery, nothing saved.

Nothing a host sends stops the monitor: a host whose data breaks a rule is judged on its last
good snapshot with a warning naming it; every file the monitor writes (alert state, history,
seat checks) that cannot be written is a warning, repeated at most every `WARN_EVERY` seconds.

`since` is computed one way in every role (`alert_starts.carry_since`): an alert that starts firing in this
engine takes the start of its firing as the history's events record it, when an observer (a
`watch`, a dashboard) recorded it firing, none recorded it resolved since, and the host's
history was written without a gap from then to now. So `fleetdeck alerts` beside a dashboard that has
seen a stray schedule for 9 minutes says 9 minutes too, not "0s ago", watch running or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fleetdeck.backend.fleet.config import Fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor import alert_state as st
from fleetdeck.backend.monitor.alertmanager.silences import SilenceSync
from fleetdeck.backend.monitor.alertmanager.sink import AlertmanagerSink
from fleetdeck.backend.monitor.history.alert_starts import carry_since
from fleetdeck.backend.monitor.history.store import History
from fleetdeck.backend.monitor.rules.alerts import Alert, AlertConfig, AlertEngine
from fleetdeck.backend.monitor.rules.launch_outcomes import LaunchOutcomes
from fleetdeck.backend.monitor.saved_state import SavedState, engine_path, open_outbox
from fleetdeck.backend.monitor.seat_rounds import SeatRounds
from fleetdeck.backend.monitor.seats import SeatCheck, recorded_checks

WARN_EVERY = 600.0
CLOSE_WITHIN = 0.5
ROLES = ("deliver", "observe", "judge")


class Monitor:
    """Polls, checks seats, keeps history, judges alerts, queues and delivers hooks, feeds metrics
    (see the module docstring for the roles). `report(kind, line)` receives `transition` and
    `warning` lines; `source` replaces the fleet's Poller (tests, the dashboard's replays)."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        role: str = "deliver",
        history: History | None = None,
        engine: AlertEngine | None = None,
        collector: Any = None,
        source: Any = None,
        report: Callable[[str, str], None] | None = None,
        link: Callable[[str], Any] | None = None,
        **deliver_opts: Any,
    ) -> None:
        assert role in ROLES, role
        self.fleet = fleet
        self.role = role
        self.config: AlertConfig = fleet.alerts or AlertConfig()  # type: ignore[assignment]
        self._owns_source = source is None
        self.poller = source if source is not None else Poller(fleet)
        #: the link to a host for seat checks (the poller's, unless the owner has its own)
        self.link = link or getattr(self.poller, "link", None)
        self.history = (
            history
            if history is not None
            else (
                None
                if role == "judge"
                else History(retention_days=self.config.history_retention_days)
            )
        )
        self.collector = collector
        self.report = report or (lambda _k, _l: None)
        self.polls = 0
        self.warned: dict[str, float] = {}
        self.seat_rounds = SeatRounds(self.warn, lambda *e: self._history("event", *e))
        self._judged: dict[str, HostSnapshot] = {}
        self._task: asyncio.Task | None = None
        self._stopping = False
        #: each launched run's end, audited once (deliver role only)
        self.outcomes = LaunchOutcomes()
        deliver = role == "deliver"
        saved, said = st.read_doc(engine_path(), move=deliver)
        self.engine = engine if engine is not None else AlertEngine(self.config)
        rejects: list[st.Reject] = []
        if engine is None:
            rejects += self.engine.load_state(
                {k: v for k, v in saved.items() if k not in ("outbox", "outbox_seq")}
            )
        self.deliverer, self.journal, more_rejects, more_said, migrate = (
            open_outbox(self.config, saved, self.warn, deliver_opts)
            if deliver
            else (None, None, [], [], False)
        )
        rejects += more_rejects
        said += more_said
        self.saved_state = SavedState(self.journal, self.warn)
        #: every firing alert to each Alertmanager of `[alerts] alertmanager` (deliver role only)
        self.alertmanager = (
            AlertmanagerSink(self.config.alertmanager, warn=self.warn)
            if deliver and self.config.alertmanager
            else None
        )  # and each fleetdeck silence made there too (alertmanager.silences), so the pager agrees
        self.am_silences = (
            SilenceSync(self.config.alertmanager, self.warn) if self.alertmanager else None
        )
        if role != "observe":  # the dashboard reads what watch saves; watch is the one to say so
            for line in said + st.report_rejects(engine_path().name, rejects, move=deliver):
                self.warn(line)
        if migrate or (deliver and rejects):
            self.save()  # the file is rewritten without what was quarantined
        self._preload()

    # -- saying things --------------------------------------------------------------------------
    def warn(self, line: str) -> None:
        """One warning line; the same one again only after WARN_EVERY seconds."""
        now = time.monotonic()
        if now - self.warned.get(line, -WARN_EVERY) < WARN_EVERY:
            return
        self.warned[line] = now
        if len(self.warned) > 1000:
            self.warned = {k: v for k, v in self.warned.items() if now - v < WARN_EVERY}
        self.report("warning", line)

    # -- state -----------------------------------------------------------------------------------
    def save(self) -> bool:
        """Write the alert state, atomically, naming the outbox journal's last entry it covers
        (deliver role only); a failure is a warning. When the journal cannot be written the
        state is not either, so the two never disagree: a transition is saved with its entry."""
        if self.role != "deliver":
            return False
        return self.saved_state.save(self.engine.to_state())

    @property
    def bytes_saved(self) -> int:
        """Bytes written to alerts.json by this monitor (benchmarks)."""
        return self.saved_state.bytes_saved

    def _preload(self) -> None:
        # disk-full-eta judges a rate over a window: start with the window history already has
        # (the dashboard does this itself on its first poll, with its sparklines)
        if self.history is None or self.role != "deliver":
            return
        since = time.time() - self.config.disk_rate_window
        try:
            for h in self.fleet.hosts:
                for path, pts in self.history.series(h.name, "disk", since).items():
                    for t, used, free in pts:
                        if used is not None and free is not None:
                            self.engine.add_disk_sample(h.name, path, t, int(used), int(free))
        except Exception as e:  # history is a help, never a reason not to start
            self.warn(f"history could not be read at start: {type(e).__name__}: {shown(str(e))}")

    def down_since(self, host: str) -> float | None:
        """Since when `host` has not answered (the alert engine's record, saved with it)."""
        return self.engine.m.down_since.get(host)

    @property
    def down_since_table(self) -> dict[str, float]:
        """The one down-since record ({host: since}), live: the dashboard's Fleet view reads and
        keeps this same table, so host-down's `since` and the view's "down since" agree."""
        return self.engine.m.down_since

    def firing(self) -> list[Alert]:
        return self.engine.firing()

    def alerts(self) -> list[Alert]:
        return self.engine.alerts()

    # -- one cycle ---------------------------------------------------------------------------------
    async def cycle(self) -> FleetSnapshot:
        """One poll with everything that follows it; the snapshot, seats included."""
        snap = await self.poller.poll()
        return await self.observe(snap, seats=True)

    async def observe(self, snap: FleetSnapshot, seats: bool = False) -> FleetSnapshot:
        """Everything after the poll, for a snapshot polled elsewhere; the snapshot, seats included."""
        if seats and hasattr(self.poller, "link"):
            snap = await self._with_seats(snap)
        checks = {**recorded_checks(), **await self._due_checks(snap)}
        self.after_poll(snap, checks)
        return snap

    def after_poll(self, snap: FleetSnapshot, checks: dict[str, SeatCheck]) -> list[Alert]:
        """History, the rules, the outbox, the saved state and the metrics for one poll; the
        transitions (what the dashboard calls on each `FleetPolled`)."""
        if self.role == "judge":
            self.polls += 1
            return self.judge(snap, checks)
        self._history("record", snap)
        if self.role == "deliver":
            self.outcomes.record(snap, self.warn)
        transitions = self.judge(snap, checks)
        if self.deliverer is not None:
            self.deliverer.enqueue(transitions)
        if self.alertmanager is not None and self.am_silences is not None:
            self.alertmanager.update(self.engine.firing(), transitions)
            self.am_silences.kick()
        self.save()  # every cycle: a transition is saved with its outbox entry before anything else
        if self.collector is not None:  # a scrape agrees with the hooks from the moment they run
            try:
                self.collector.update(snap, self.engine.firing(), checks)
            except Exception as e:
                self.warn(f"metrics not updated: {type(e).__name__}: {shown(str(e))}")
        for a in transitions:
            self._history(
                "event", a.since, a.host, f"alert-{a.state}", f"{a.rule} {a.subject}", a.text
            )
            held = self.deliverer.held_note(a) if self.deliverer is not None else ""
            self.report(
                "transition",
                f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {shown(a.title)}: {shown(a.text)}{held}",
            )
        if self.history is not None:
            for w in self.history.warnings:
                self.warn(w)
            self.history.warnings.clear()
        self.polls += 1
        return transitions

    def judge(self, snap: FleetSnapshot, checks: dict[str, SeatCheck]) -> list[Alert]:
        """The rules on `snap`. A host whose data makes a rule fail is judged on its last good
        snapshot instead (its alerts stay as they were), with a warning naming it."""
        try:
            out = self.engine.evaluate(snap, checks)
        except Exception as first:
            bad = {}
            for h in snap.hosts:
                trial = AlertEngine(self.config)
                trial.load_state(self.engine.to_state())
                try:
                    trial.evaluate(replace(snap, hosts=(h,)), checks)
                except Exception as e:
                    bad[h.name] = e
            if not bad:
                self.warn(
                    f"the alert rules failed on this poll: {type(first).__name__}: {shown(str(first))}"
                )
                return []
            for name, err in bad.items():
                self.warn(
                    f"{name}: what the host sent could not be judged ({type(err).__name__}: "
                    f"{shown(str(err))[:200]}); its alerts stay as they were"
                )
            hosts = tuple(self._stand_in(h) if h.name in bad else h for h in snap.hosts)
            try:
                out = self.engine.evaluate(replace(snap, hosts=hosts), checks)
            except Exception as e:
                self.warn(
                    f"the alert rules failed on this poll: {type(e).__name__}: {shown(str(e))}"
                )
                return []
            snap = replace(snap, hosts=hosts)
        for h in snap.hosts:
            if h.reachable:
                self._judged[h.name] = h
        return self.carry_since(out, snap.time or time.time())

    def carry_since(self, transitions: list[Alert], now: float) -> list[Alert]:
        """`transitions` with each alert that starts firing dated from the start the history
        records for it (`alert_starts.carry_since`), in the engine's memory too."""
        return carry_since(
            transitions,
            now,
            history=self.history,
            engine=self.engine,
            retention_days=self.config.history_retention_days,
            warn=self.warn,
        )

    def _stand_in(self, h: HostSnapshot) -> HostSnapshot:
        last = self._judged.get(h.name)
        if last is not None:
            return replace(last, time=h.time)
        return replace(h, gpus=(), disks=(), runs=(), schedules=(), seats=())

    def _history(self, op: str, *args: Any) -> None:
        if self.history is None:
            return
        try:
            getattr(self.history, op)(*args)
        except Exception as e:  # history is a warning, never a crash
            self.warn(
                f"history {self.history.path}: {op} failed: {type(e).__name__}: {shown(str(e))[:200]}"
            )

    async def _with_seats(self, snap: FleetSnapshot) -> FleetSnapshot:
        return await self.seat_rounds.with_seats(snap, self.poller.link)

    async def _due_checks(self, snap: FleetSnapshot) -> dict[str, SeatCheck]:
        every = self.config.seat_check_interval
        if not every or self.role != "deliver" or self.link is None:
            return {}
        return await self.seat_rounds.due_checks(snap, every, self.check_seat)

    async def check_seat(self, host: str, port: int) -> SeatCheck:
        """Check one seat from its host now (`seats check`); the verdict is kept for the
        seat-check rule and written to history; one that cannot be kept is a warning. Raises
        what `seats.check_seat` raises when the check cannot run."""
        if self.link is None:
            raise OSError(f"no link to {host} to check a seat from")
        return await self.seat_rounds.check(self.link(host), host, port)

    # -- the loop --------------------------------------------------------------------------------------
    async def run(self, count: int | None = None, interval: float | None = None) -> None:
        """Cycle until `count` cycles are done or `stop()` is called; deliveries run beside the
        cycles. On the way out the state is saved and every connection closed (bounded)."""
        interval = interval or self.fleet.poll_interval
        if count is None and self._owns_source and hasattr(self.poller, "deadline"):
            # a service: a silent host never holds back the next cycle (it answers into a later one)
            self.poller.deadline = max(1.0, interval / 2)
        delivery = [
            asyncio.ensure_future(d.run())
            for d in (self.deliverer, self.alertmanager)
            if d is not None
        ]
        try:
            while not self._stopping:
                self._task = asyncio.ensure_future(self._cycle_then_rest(count, interval))
                try:
                    if await self._task:
                        break
                except asyncio.CancelledError:
                    if not self._stopping:
                        raise
                finally:
                    self._task = None
            if (
                count is not None and not self._stopping
            ):  # `--count`: what this run queued is attempted
                await asyncio.gather(
                    *(d.drain() for d in (self.deliverer, self.alertmanager) if d is not None)
                )
        finally:
            for task in delivery:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.save()
            if self.journal is not None:
                self.journal.close()
            await self.close()

    async def _cycle_then_rest(self, count: int | None, interval: float) -> bool:
        try:
            await self.cycle()
        except Exception as e:  # a bug in one cycle is a warning; the next cycle comes
            self.warn(f"a poll cycle failed: {type(e).__name__}: {shown(str(e))[:300]}")
            self.polls += 1
        if count is not None and self.polls >= count:
            return True
        await asyncio.sleep(interval)
        return False

    def stop(self) -> None:
        """End `run()` now: the cycle in flight (poll, seat check or rest) is cancelled; `run`
        then saves and closes. Safe to call from a signal handler."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        """Close the poller's connections (within CLOSE_WITHIN seconds) and the history."""
        if self._owns_source and hasattr(self.poller, "close"):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(CLOSE_WITHIN):
                    await self.poller.close()
        if self.history is not None:
            with contextlib.suppress(Exception):
                self.history.close()
        if self.history is not None:
            for w in self.history.warnings:
                self.warn(w)
            self.history.warnings.clear()


__all__ = ["Monitor", "ROLES"]
