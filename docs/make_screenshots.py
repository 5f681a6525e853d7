"""Regenerate docs/fleet.svg: the Fleet view over the recorded fleet in tests/fixtures.

    python docs/make_screenshots.py

Twenty recorded polls with the GPUs' memory moving give the sparklines some history; the
snapshots go through the same FleetPolled path a live poll takes.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import replace
from pathlib import Path

from fleetdeck.backend.config import parse_fleet
from fleetdeck.backend.models import fleet_from_json
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.screens.base import RecordedSource

HERE = Path(__file__).parent
FIXTURES = HERE.parent / "tests" / "fixtures"


def load(name: str):
    return fleet_from_json(json.loads((FIXTURES / name).read_text()))


async def main() -> None:
    earlier, now = load("fleet-earlier.json"), load("fleet.json")
    names = [h.name for h in now.hosts]
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in names), "hosts.toml")
    app = FleetdeckApp(fleet, RecordedSource([earlier]), autopoll=False, clock=lambda: now.time + 1)
    async with app.run_test(size=(120, 32)) as pilot:
        for i in range(20):
            base = earlier if i < 12 else now
            hosts = []
            for h in base.hosts:
                gpus = tuple(replace(g, memory_used_mib=max(0.0, min(g.memory_total_mib, g.memory_used_mib
                                     * (0.75 + 0.25 * math.sin(i / 3 + g.index))))) for g in h.gpus)
                hosts.append(replace(h, gpus=gpus))
            app.post_message(FleetPolled(replace(base, hosts=tuple(hosts))))
            await pilot.pause()
        app.post_message(FleetPolled(now))
        await pilot.pause()
        await pilot.press("j")
        await pilot.pause()
        app.save_screenshot("fleet.svg", path=str(HERE))
    print(HERE / "fleet.svg")


if __name__ == "__main__":
    asyncio.run(main())
