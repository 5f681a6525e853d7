"""Hand-made polls for the alert toasts and silences: hosts up, a NaN run, a stray schedule,
and a dashboard over them."""

from __future__ import annotations

import sys

from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run, Schedule


def alert_toasts(notes: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return [(m, k) for m, k in notes if str(k.get("title", "")).startswith(("ALERT", "Alerts"))]


def nan_run(host: str, name: str = "run-7") -> Run:
    return Run(
        host=host, path=f"/runs/{name}", name=name, state="running", reason="loss is nan at step 40"
    )


def stray(host: str, n: int) -> Schedule:
    return Schedule(
        id=f"c-{n:032x}",
        host=host,
        kind="crontab",
        user="op",
        spec="37 * * * *",
        command=f"/home/op/check-{n}.sh",
        source="crontab",
        stray=True,
        reasons=("unacknowledged",),
    )


def app_over(*polls: tuple[HostSnapshot, ...]):
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.sources import RecordedSource

    names = sorted({h.name for hosts in polls for h in hosts})
    fleet = parse_fleet(
        "".join(f'[hosts.{n}]\nlocal = true\npython = "{sys.executable}"\n' for n in names),
        "fixture",
    )
    snaps = [FleetSnapshot(hosts=hosts, time=1000.0 + 5 * i) for i, hosts in enumerate(polls)]
    app = FleetdeckApp(fleet, RecordedSource(snaps), autopoll=False, clock=lambda: 2000.0)
    app.alert_watch.enabled = True  # a replay is not judged unless asked
    return app


def up(name: str, t: float = 1000.0, **kw) -> HostSnapshot:
    return HostSnapshot(name=name, reachable=True, time=t, **kw)
