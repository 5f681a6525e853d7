"""Snapshot (pytest-textual-snapshot) of the Alerts view over the recorded fleet, with seats on
a shared card. Update with `pytest tests/monitor/test_alerts_snapshot.py --snapshot-update`."""

from __future__ import annotations

import time

from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, GpuProcess
from fleetdeck.backend.fleet.seat_model import Seat

from support.recorded import feed, fixture_app


def with_seats(snap: FleetSnapshot) -> FleetSnapshot:
    """The recorded fleet, ana-ml2 serving two seats on a card with 4.5 GiB left."""
    from dataclasses import replace

    hosts = []
    for h in snap.hosts:
        if h.name == "ana-ml2" and h.reachable:
            card = Gpu(
                index=0,
                name="NVIDIA A100 80GB",
                uuid="GPU-ana-0",
                unified_memory=False,
                memory_total_mib=81559,
                memory_used_mib=77000,
                utilization_pct=41,
                processes=(
                    GpuProcess(pid=3101, user="svc", used_mib=31000, command="vllm serve q4"),
                    GpuProcess(pid=3202, user="svc", used_mib=43000, command="vllm serve big"),
                ),
            )
            seats = (
                Seat(
                    host=h.name,
                    kind="vllm",
                    port=8038,
                    model="q4",
                    pid=3101,
                    pids=(3101,),
                    container={"name": "seat-38"},
                    restarts=0,
                ),
                Seat(
                    host=h.name,
                    kind="vllm",
                    port=8052,
                    model="big",
                    pid=3202,
                    pids=(3202,),
                    container={"name": "seat-52"},
                    restarts=2,
                ),
            )
            h = replace(h, gpus=(card,), seats=seats)
        hosts.append(h)
    return replace(snap, hosts=tuple(hosts))


def test_alerts_view(snap_compare, monkeypatch):
    from fleetdeck.backend.monitor import alerts

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    # the recorded fleet's stray loops fire on the first poll, as if they had run for a while
    monkeypatch.setattr(alerts, "LOOP_SETTLE_S", 0.0)
    app = fixture_app()
    app.source.snapshots = [with_seats(s) for s in app.source.snapshots]
    app.alert_watch.enabled = True

    async def run_before(pilot):
        await feed(app, pilot)
        app.clear_notifications()  # the view, not the toasts that announced its alerts
        await pilot.pause()

    try:
        assert snap_compare(app, terminal_size=(120, 40), run_before=run_before, press=["5"])
    finally:
        monkeypatch.undo()
        time.tzset()
