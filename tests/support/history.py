"""A recorded night of polls in the history database."""

from __future__ import annotations

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run
from fleetdeck.backend.monitor.history.store import History, history_path


def _night(now: float) -> None:
    """Six hours of polls, one a minute: GPU0's memory creeps up, a run's loss falls, a host
    whose run folder is named with an escape sequence."""
    h = History(history_path())
    start = now - 6 * 3600
    for i in range(6 * 60):
        t = start + i * 60
        used = 10_000 + i * 150.0
        host = HostSnapshot(
            name="gx10",
            reachable=True,
            time=t,
            latency_ms=20.0,
            gpus=(
                Gpu(
                    index=0,
                    name="GB10",
                    uuid="GPU-0",
                    unified_memory=True,
                    memory_total_mib=120_000.0,
                    memory_used_mib=used,
                    utilization_pct=50.0,
                ),
            ),
            disks=(
                Disk(
                    path="/tank",
                    mount="/tank",
                    fstype="zfs",
                    total_bytes=10**12,
                    used_bytes=4 * 10**11 + i * 10**8,
                    free_bytes=6 * 10**11 - i * 10**8,
                ),
            ),
            runs=(
                Run(
                    host="gx10",
                    path="/runs/run-\x1b[2J7",
                    name="run-\x1b[2J7",
                    state="running",
                    step=i,
                    loss=3.0 - i / 400,
                    eval_losses=((i, 3.1 - i / 500),),
                ),
            ),
        )
        h.record(FleetSnapshot(hosts=(host,), time=t))
    h.close()
