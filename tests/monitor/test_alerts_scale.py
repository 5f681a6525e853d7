"""The alert rules' work a host is the same in a fleet of 40 hosts as in one of 400: judging a
host looks at its own runs, events and removals, never at every host's. Counted in calls (the
profiler's hook), not timed: a machine's load moves a time, not a count."""

from __future__ import annotations

import sys
from dataclasses import replace

from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run, Schedule
from fleetdeck.backend.monitor.rules.alerts import AlertEngine

T0 = 1_800_000_000.0


def fleet(n: int, t: float, state: str) -> FleetSnapshot:
    """`n` hosts, each with three runs in `state` (the third one always running) and a stray
    crontab line of its own."""
    hosts = []
    for i in range(n):
        name = f"h{i:04d}"
        runs = tuple(
            Run(
                host=name,
                path=f"/runs/run-{k}",
                name=f"run-{k}",
                state=state if k < 2 else "running",
            )
            for k in range(3)
        )
        stray = Schedule(
            id=f"c-{i:08x}", host=name, kind="cron", user="root", spec="0 3 * * *",
            command=f"/opt/backup-{i}.sh", source="crontab", stray=True,
            reasons=("unacknowledged",),
        )  # fmt: skip
        hosts.append(HostSnapshot(name=name, reachable=True, time=t, runs=runs, schedules=(stray,)))
    return FleetSnapshot(hosts=tuple(hosts), time=t)


def calls_a_host(n: int) -> float:
    """Calls (Python and C) of one evaluation a host, over `n` hosts whose runs failed a poll
    ago (their run-failed events held, their runs remembered)."""
    engine = AlertEngine()
    engine.evaluate(fleet(n, T0, "running"))
    fired = engine.evaluate(fleet(n, T0 + 5, "failed"))
    assert sum(a.rule == "run-failed" for a in fired) == 2 * n  # the work counted is real work
    snap = fleet(n, T0 + 10, "failed")
    # one run gone from each host: its remembered state is forgotten, host by host
    snap = replace(snap, hosts=tuple(replace(h, runs=h.runs[1:]) for h in snap.hosts))
    count = 0

    def hook(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(hook)
    try:
        engine.evaluate(snap)
    finally:
        sys.setprofile(None)
    assert len(engine.m.runs) == 2 * n and len(engine.m.run_events) == 2 * n
    return count / n


def test_judging_a_host_costs_the_same_calls_in_a_fleet_ten_times_larger():
    small, large = calls_a_host(40), calls_a_host(400)
    # flat: what grows with the fleet is once a poll (a few calls over 400 hosts), not a host's
    assert large <= small * 1.05, (small, large)
