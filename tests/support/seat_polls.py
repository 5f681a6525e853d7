"""Hosts with seats on them, and a dashboard over one poll of them."""

from __future__ import annotations


# -- the seats under the alerts: every line names its cause --------------------------------------
def _seats_app(hosts, clock: float = 2.0):
    import sys

    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.models import FleetSnapshot
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.sources import RecordedSource

    snap = FleetSnapshot(hosts=tuple(hosts), time=1.0)
    fleet = parse_fleet(
        "".join(f'[hosts.{h.name}]\nlocal = true\npython = "{sys.executable}"\n' for h in hosts),
        "fixture",
    )
    return FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: clock)


def _host(name, gpus, seats):
    from fleetdeck.backend.fleet.models import HostSnapshot

    return HostSnapshot(name=name, reachable=True, time=1.0, gpus=gpus, seats=seats)


def _seat(host, port, pid):
    from fleetdeck.backend.fleet.seat_model import Seat

    return Seat(host=host, kind="vllm", port=port, model="m", pid=pid, pids=(pid,))
