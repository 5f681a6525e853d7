"""Regenerate the screenshots in docs/: the key screens over the recorded fleet in tests/support/fixtures.

    python docs/make_screenshots.py

fleet.svg (120x32), fleet-80x24.svg, runs.svg, schedules.svg, help.svg, purge.svg (the plan of
two checkpoints, one refused), mirror.svg (after a dry run), all at 100x30 unless named.
Twenty recorded polls with the GPUs' memory moving give the sparklines some history; the
snapshots go through the same FleetPolled path a live poll takes.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import replace
from pathlib import Path

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.validate import fleet_from_json
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource

HERE = Path(__file__).parent
FIXTURES = HERE.parent / "tests" / "support" / "fixtures"


def load(name: str):
    return fleet_from_json(json.loads((FIXTURES / name).read_text()))


def purge_plan():
    """A plan of two checkpoints of run-7, the second held open by a process."""
    from fleetdeck.backend.actions.purge.plan import Keeper, PathPlan, PurgePlan, Refusal

    run, gib = "/home/ops/runs/run-7", 1024**3
    checks = (
        "not-found",
        "symlink",
        "outside-roots",
        "is-root",
        "holds-final-adapter",
        "in-use",
        "mounted",
    )

    def path(step, refusals=()):
        bad = {r.code for r in refusals}
        p = f"{run}/checkpoints/checkpoint-{step}"
        return PathPlan(
            path=p,
            resolved=p,
            bytes=8 * gib,
            expected_bytes=8 * gib,
            refusals=tuple(refusals),
            checks=tuple((c, "fail" if c in bad else "pass") for c in checks),
            pins=(),
            free_bytes=3281 * gib,
            fstype="ext4",
            runs=(run,),
        )

    held = Refusal("in-use", "pid 41233 (python) has checkpoint-50/adapter_model.safetensors open")
    return PurgePlan(
        host="gx10",
        paths=(path(25), path(50, (held,))),
        keepers=(
            Keeper(
                f"{run}/adapter/adapter_model.safetensors",
                run,
                160 * 1024**2,
                "9f2c1e0a7b3d5e8f" * 4,
                (1, 2, 3, 4),
            ),
        ),
        roots=(("~/runs", "/home/ops/runs"),),
        free_bytes_before=3281 * gib,
        expected_bytes=16 * gib,
        warnings=(),
    )


def mirror_dry_run():
    """What a dry run of run-6's adapter to ana-ml2 reports."""
    from fleetdeck.backend.actions.mirror.common import MirrorFile
    from fleetdeck.backend.actions.mirror.report import MirrorReport

    files = (
        MirrorFile("adapter_model.safetensors", 167772160, "ab" * 32, None, "missing"),
        MirrorFile("adapter_config.json", 812, "cd" * 32, None, "missing"),
    )
    return MirrorReport(
        src="gx10:/home/ops/runs/run-6/adapter",
        dst="ana-ml2:/home/ops/runs/run-6/adapter",
        dry_run=True,
        verified=False,
        bytes_src=167772972,
        bytes_dst=0,
        files=files,
        result="would-copy",
    )


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
                gpus = tuple(
                    replace(
                        g,
                        memory_used_mib=max(
                            0.0,
                            min(
                                g.memory_total_mib,
                                g.memory_used_mib * (0.75 + 0.25 * math.sin(i / 3 + g.index)),
                            ),
                        ),
                    )
                    for g in h.gpus
                )
                hosts.append(replace(h, gpus=gpus))
            app.post_message(FleetPolled(replace(base, hosts=tuple(hosts))))
            await pilot.pause()
        app.post_message(FleetPolled(now))
        await pilot.pause()
        await pilot.press("j")
        await pilot.pause()
        app.save_screenshot("fleet.svg", path=str(HERE))
        print(HERE / "fleet.svg")
        await shots(app, pilot)


async def shot(app, pilot, name: str, size: tuple[int, int]) -> None:
    """Resize, let the screen settle (cursor blink off), save docs/NAME."""
    await pilot.resize_terminal(*size)
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
    from textual.widgets import Input

    for inp in app.screen.query(Input):
        inp.cursor_blink = False
    app.save_screenshot(name, path=str(HERE))
    print(HERE / name)


async def shots(app, pilot) -> None:
    """The other key screens, from the fleet already fed."""
    from fleetdeck.tui.modals.mirror import MirrorModal
    from fleetdeck.tui.modals.purge import PurgeModal

    await shot(app, pilot, "fleet-80x24.svg", (80, 24))
    await pilot.press("2")
    await shot(app, pilot, "runs.svg", (100, 30))
    await pilot.press("3")
    await shot(app, pilot, "schedules.svg", (100, 30))
    await pilot.press("question_mark")
    await shot(app, pilot, "help.svg", (100, 30))
    await pilot.press("escape", "2")
    plan = purge_plan()
    app.push_screen(PurgeModal("gx10", [p.path for p in plan.paths], plan=plan))
    await shot(app, pilot, "purge.svg", (100, 30))
    await pilot.press("escape")
    modal = MirrorModal("gx10", "/home/ops/runs/run-6/adapter")
    app.push_screen(modal)
    await pilot.pause()
    modal.query_one("#mirror-host").value = "ana-ml2"
    await pilot.pause()
    rep = mirror_dry_run()
    modal.show_report(rep, "ana-ml2", True)
    modal.dry_for, modal.plan = modal.destination(), rep
    modal.refresh_act()
    from rich.text import Text

    modal.query_one("#mirror-rate").update(Text("dry run: nothing was copied", style="dim"))
    modal.query_one("#act").focus()
    await shot(app, pilot, "mirror.svg", (100, 30))


if __name__ == "__main__":
    asyncio.run(main())
