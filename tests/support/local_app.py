"""The dashboard over local hosts with real run folders, and the keys that drive its pop-ups."""

from __future__ import annotations

import os
from pathlib import Path

from textual.widgets import Input

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.sources import RecordedSource

from support.weights import safetensors

HOSTILE = "run 1 $(touch pwned) 'q'"


def make_run(root: Path, name: str = HOSTILE) -> tuple[Path, Path]:
    """A run with two checkpoints and a final adapter; returns (run, first checkpoint)."""
    run = root / "runs" / name
    for step in (25, 50):
        ck = run / "checkpoints" / f"checkpoint-{step}"
        ck.mkdir(parents=True)
        (ck / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(4096)))
        (ck / "adapter_config.json").write_text("{}")
    (run / "adapter").mkdir()
    (run / "adapter" / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(8192)))
    (run / "adapter" / "adapter_config.json").write_text("{}")
    (run / "progress.jsonl").write_text('{"step": 50, "max_steps": 50, "loss": 1.0}\n')
    return run, run / "checkpoints" / "checkpoint-25"


def local_app(tmp_path: Path, names=("local",)) -> FleetdeckApp:
    toml = "".join(f'[hosts.{n}]\nlocal = true\nruns = ["{tmp_path}/runs"]\n' for n in names)
    fleet = parse_fleet(toml, "test")
    empty = FleetSnapshot(
        hosts=tuple(HostSnapshot(name=n, reachable=True, time=1.0) for n in names), time=1.0
    )
    return FleetdeckApp(fleet, RecordedSource([empty]), autopoll=False, clock=lambda: 1.0)


async def open_purge(app, pilot, paths):
    app.push_screen(PurgeModal("local", [str(p) for p in paths]))
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
    return app.screen


async def type_into(pilot, inp: Input, text: str):
    # set as a paste would: spelling `$(` or quotes as key names is not what is under test
    inp.focus()
    inp.value = text
    await pilot.pause()


async def dry_run(app, pilot, modal):
    """Enter in the path field: the dry run (never the copy)."""
    modal.query_one("#mirror-path", Input).focus()
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
