"""The alert rules' work a host is the same in a fleet of 40 hosts as in one of 400: judging a
host looks at its own runs, events, idle GPU holders and seat checks, never at every host's. Counted in calls (the
profiler's hook), not timed: a machine's load moves a time, not a count."""

from __future__ import annotations

import sys
from dataclasses import replace

from fleetdeck.backend.fleet.models import (
    FleetSnapshot,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Run,
    Schedule,
)
from fleetdeck.backend.monitor.rules.alerts import AlertEngine
from fleetdeck.backend.monitor.seats import SeatCheck

T0 = 1_800_000_000.0


def fleet(n: int, t: float, state: str, holders: int = 2) -> FleetSnapshot:
    """`n` hosts, each with three runs in `state` (the third one always running), a stray
    crontab line of its own and an idle card that `holders` processes hold memory on."""
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
        procs = tuple(GpuProcess(pid=100 + k, user="ml", used_mib=4096, command="python")
                      for k in range(holders))  # fmt: skip
        card = Gpu(index=0, name="H100", uuid=f"GPU-{i}", unified_memory=False,
                   memory_total_mib=81559, memory_used_mib=8192, utilization_pct=0,
                   processes=procs)  # fmt: skip
        hosts.append(
            HostSnapshot(
                name=name, reachable=True, time=t, runs=runs, schedules=(stray,), gpus=(card,)
            )
        )
    return FleetSnapshot(hosts=tuple(hosts), time=t)


def checks(n: int) -> dict[str, SeatCheck]:
    """A failed check of a seat on port 8000 of each of `n` hosts."""
    return {
        f"h{i:04d}:8000:chat": SeatCheck(
            host=f"h{i:04d}", port=8000, sound=False, signature="nan", message="NaN logprobs"
        )
        for i in range(n)
    }


def calls_a_host(n: int) -> float:
    """Calls (Python and C) of one evaluation a host, over `n` hosts whose runs failed a poll
    ago (their run-failed events held, their runs remembered) and whose idle holders are
    watched."""
    engine = AlertEngine()
    engine.evaluate(fleet(n, T0, "running"), checks(n))
    fired = engine.evaluate(fleet(n, T0 + 5, "failed"), checks(n))
    # the work counted is real work
    assert sum(a.rule == "run-failed" for a in fired) == 2 * n
    assert sum(a.rule == "seat-check" for a in engine.firing()) == n
    assert len(engine.m.idle_since) == 2 * n
    # one run and one holder gone from each host: what was remembered of them is forgotten
    snap = fleet(n, T0 + 10, "failed", holders=1)
    snap = replace(snap, hosts=tuple(replace(h, runs=h.runs[1:]) for h in snap.hosts))
    seat_checks = checks(n)
    count = 0

    def hook(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(hook)
    try:
        engine.evaluate(snap, seat_checks)
    finally:
        sys.setprofile(None)
    assert len(engine.m.runs) == 2 * n and len(engine.m.run_events) == 2 * n
    assert len(engine.m.idle_since) == n
    return count / n


def test_judging_a_host_costs_the_same_calls_in_a_fleet_ten_times_larger():
    small, large = calls_a_host(40), calls_a_host(400)
    # flat: what grows with the fleet is once a poll (a few calls over 400 hosts), not a host's
    assert large <= small * 1.05, (small, large)
