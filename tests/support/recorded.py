"""The dashboard over the recorded fleets in tests/support/fixtures/, and reading its tables."""

from __future__ import annotations

import json
from pathlib import Path

from rich.text import Text

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, GpuProcess
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.fleet.validate import fleet_from_json
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.widgets.keyed_table import KeyedTable

FIXTURES = Path(__file__).parent / "fixtures"


T = 1764421200.0  # the recorded snapshots' clock


NAMES = ["gx10", "ana-ml2", "nh3-dev", "irv-ml1"]


def recorded(name: str):
    return fleet_from_json(json.loads((FIXTURES / name).read_text()))


def fixture_app(**kw) -> FleetdeckApp:
    """The dashboard over the recorded fleet: an earlier poll, then the current one."""
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in NAMES), "fixture")
    src = RecordedSource([recorded("fleet-earlier.json"), recorded("fleet.json")])
    return FleetdeckApp(fleet, src, autopoll=False, clock=lambda: T, **kw)


async def feed(app, pilot, n=2):
    for _ in range(n):
        app.poll_fleet()
        await app.workers.wait_for_complete()
        await pilot.pause()


def cell_text(table, row, col) -> str:
    v = table.get_cell(row, col)
    return v.plain if isinstance(v, Text) else str(v)


def app_over(snap: FleetSnapshot) -> FleetdeckApp:
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in NAMES), "fixture")
    return FleetdeckApp(fleet, RecordedSource([snap, snap]), autopoll=False, clock=lambda: T)


def plain(v) -> str:
    return v.plain if isinstance(v, Text) else str(v)


def visible_columns(table: KeyedTable, width: int) -> list[str]:
    """Keys of the columns wholly inside the table's visible width (no horizontal scroll)."""
    out, x = [], 0
    for col in table.ordered_columns:
        x += col.get_render_width(table)
        if x <= width:
            out.append(col.key.value)
    return out


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
