"""The Fleet view at rest in Python function calls (cProfile), load-independent: the real app
headless, --hosts hosts (two GPUs, a disk and a finished run each) polled by posting fresh
snapshot objects each second of an injected clock, as a poller's are; once the GPU sparklines
are full of the same figure, the mean calls of one poll and of one tick, each with the frame it
draws, less the calls of the harness alone (the pilot's pauses, nothing posted), in three
cases:

- `same`: every host's figures equal to the poll before (only the answers' times move);
- `latency`: every host brings a new latency each poll (shown once a second: each poll here);
- `down tick`: a quarter of the hosts down, the clock's tick a second later (their ages move).

`PYTHONPATH` picks the tree, as `fleetdeck`: run it once per build.

    python benchmarks/tui_rest_calls.py --hosts 12 --polls 20
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
from dataclasses import replace


async def measure(n_hosts: int, polls: int) -> dict[str, float]:
    # deferred: fleetdeck (PYTHONPATH picks the tree)
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, HostSnapshot, Run
    from fleetdeck.tui.app import FleetdeckApp
    from fleetdeck.tui.fleet_state import HISTORY
    from fleetdeck.tui.messages import FleetPolled
    from fleetdeck.tui.sources import RecordedSource

    names = [f"h{i:02d}" for i in range(n_hosts)]
    now = [1000.0]

    def host(name: str, latency: float, down: bool) -> HostSnapshot:
        h = HostSnapshot(
            name=name,
            reachable=True,
            time=now[0],
            latency_ms=latency,
            gpus=tuple(
                Gpu(
                    index=g,
                    name="NVIDIA H100",
                    uuid=f"{name}-{g}",
                    unified_memory=False,
                    utilization_pct=0.0,
                    memory_total_mib=81559,
                    memory_used_mib=1000.0,
                )
                for g in range(2)
            ),
            disks=(Disk("~/runs", "/", "ext4", 2000 << 30, 1000 << 30, 0),),
            runs=(Run(host=name, path=f"/r/{name}", name=f"run-{name}", state="finished"),),
        )
        return replace(h, reachable=False, error="timed out") if down else h

    def snap(i: int, moving: bool, down: bool = False) -> FleetSnapshot:
        hosts = tuple(
            host(n, 5.0 + ((i * 7 + k) % 60 if moving else 0), down and k % 4 == 0)
            for k, n in enumerate(names)
        )
        return FleetSnapshot(hosts=hosts, time=now[0])

    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in names), "calls")
    app = FleetdeckApp(
        fleet, RecordedSource([snap(0, False)]), autopoll=False, clock=lambda: now[0]
    )
    out: dict[str, float] = {}
    async with app.run_test(size=(160, 48)) as pilot:

        async def settle() -> None:
            for _ in range(3):
                await pilot.pause()

        async def counted(action) -> int:
            prof = cProfile.Profile()
            prof.enable()
            action()
            await settle()
            prof.disable()
            return pstats.Stats(prof, stream=io.StringIO()).total_calls  # type: ignore[attr-defined]

        # the harness alone (three pauses of the pilot, nothing posted): taken off each case
        idle = [await counted(lambda: None) for _ in range(polls)]
        out["harness alone"] = sum(idle) / len(idle)
        for case, moving in (("same", False), ("latency", True)):
            for i in range(HISTORY + 2):
                now[0] += 1
                app.post_message(FleetPolled(snap(i, moving)))
                await settle()
            calls = []
            for i in range(polls):
                now[0] += 1
                calls.append(
                    await counted(lambda i=i, m=moving: app.post_message(FleetPolled(snap(i, m))))
                )
            out[f"poll, {case}"] = sum(calls) / len(calls)
        now[0] += 1
        app.post_message(FleetPolled(snap(0, False, down=True)))
        await settle()
        calls = []
        for _ in range(polls):
            now[0] += 1
            calls.append(await counted(lambda: app.refresh_views(tick=True)))
        out["tick, down hosts"] = sum(calls) / len(calls)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=12)
    ap.add_argument("--polls", type=int, default=20, help="polls (and ticks) counted per case")
    a = ap.parse_args()
    out = asyncio.run(measure(a.hosts, a.polls))
    base = out["harness alone"]
    print(
        json.dumps(
            {k: round(v if k == "harness alone" else v - base) for k, v in out.items()}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
