"""The audit log's `launch-outcome` records: each launched run's end, once (`service.Monitor`
in its delivering role calls `record` after every poll)."""

from __future__ import annotations

import time
from collections.abc import Callable

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.audit_records import (
    LaunchOutcomeRecord,
    LaunchRecord,
    parse,
    write,
)
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.host.lib.text import shown


class LaunchOutcomes:
    """What the audit log says was launched and which ends it already holds."""

    def __init__(self) -> None:
        #: launches the audit log holds and the outcomes already recorded, by (host, run path):
        #: the time of the newest of each (re-read when the log changes)
        self._audit_key: tuple[int, int] | None = None
        self._launched: dict[tuple[str, str], tuple[int, float]] = {}
        self._outcome: dict[tuple[str, str], float] = {}

    def record(self, snap: FleetSnapshot, warn: Callable[[str], None]) -> None:
        """The audit log gets each launched run's end once: `launch-outcome` with the state the
        host shows (finished, failed, cancelled) and its reason, for every run a `launch` record
        names that ended after its newest launch. Only the deliverer writes it (one per state
        folder), so the dashboard beside a `watch` never records it twice."""

        try:
            st = audit.audit_path().stat()
        except OSError:
            return
        if (st.st_mtime_ns, st.st_size) != self._audit_key:
            self._audit_key = (st.st_mtime_ns, st.st_size)
            launched: dict[tuple[str, str], tuple[int, float]] = {}
            outcome: dict[tuple[str, str], float] = {}
            # by their order in the log (a clock can step back); the launch's time for its grace
            for i, line in enumerate(audit.read_audit()):
                rec = parse(line)
                if isinstance(rec, LaunchRecord) and rec.result in ("started", "queued"):
                    ts = rec.stamp.ts if rec.stamp is not None else None
                    launched[(str(rec.host), str(rec.run))] = (i, ts if ts is not None else 0.0)
                elif isinstance(rec, LaunchOutcomeRecord):
                    outcome[(str(rec.host), str(rec.run))] = float(i)
            self._launched, self._outcome = launched, outcome
        for h in snap.hosts:
            if not h.reachable:
                continue
            for r in h.runs:
                key = (h.name, r.path)
                if r.state not in ("finished", "failed", "cancelled") or key not in self._launched:
                    continue
                at, ts = self._launched[key]
                if self._outcome.get(key, -1.0) > at:
                    continue
                if (r.last_update or 0.0) < ts and (h.time or time.time()) - ts < 60:
                    continue  # a run just launched again (a resume) still shows how it ended before
                try:
                    write(
                        LaunchOutcomeRecord(
                            host=h.name,
                            result=r.state,
                            run=r.path,
                            name=r.name,
                            reason=r.reason,
                            step=r.step,
                            max_steps=r.max_steps,
                            adapter=r.adapter,
                        )
                    )
                except OSError as e:
                    warn(f"a launch's outcome could not be audited: {shown(str(e))}")
                    return
                self._outcome[key] = float(
                    "inf"
                )  # recorded: its place in the log is read next time


__all__ = ["LaunchOutcomes"]
