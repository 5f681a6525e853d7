"""A host as a poll brings it, for the tests of the dashboard at rest: new objects at each call,
so that what is compared is the records' values, never their identity."""

from __future__ import annotations

from fleetdeck.backend.fleet.models import Disk, Gpu, HostSnapshot, Run


def polled_host(
    name: str,
    now: float,
    latency: float | None = 20.0,
    used: float | dict[int, float] = 1000.0,
    cards: int = 2,
    total_mib: float = 81559,
    disk_and_run: bool = True,
) -> HostSnapshot:
    """Host `name` at `now`: `cards` H100s holding `used` MiB (one figure, or by index, 1000
    MiB where it names none) and, with `disk_and_run`, a disk and a finished run."""
    return HostSnapshot(
        name=name,
        reachable=True,
        time=now,
        latency_ms=latency,
        gpus=tuple(
            Gpu(
                index=g,
                name="NVIDIA H100",
                uuid=f"{name}-{g}",
                unified_memory=False,
                utilization_pct=0.0,
                memory_total_mib=total_mib,
                memory_used_mib=used.get(g, 1000.0) if isinstance(used, dict) else used,
            )
            for g in range(cards)
        ),
        disks=(Disk("~/runs", "/", "ext4", 2000 << 30, 1000 << 30, 0),) if disk_and_run else (),
        runs=(Run(host=name, path=f"/r/{name}", name=f"run-{name}", state="finished", step=9),)
        if disk_and_run
        else (),
    )
