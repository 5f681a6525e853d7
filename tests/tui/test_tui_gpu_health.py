"""A card's health where people look: temperature, power and a throttle mark in the Fleet row
(the reason in words under the table), and the Host view's per-GPU health panel, from a
recorded fleet whose cards report them (tests/support/fixtures/fleet-health.json), and from cards that
report nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from textual.widgets import Static

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import Gpu, GpuEcc, GpuPcie, HostSnapshot, Xid
from fleetdeck.backend.fleet.validate import fleet_from_json
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.fleet_state import FleetState
from fleetdeck.tui.rows.fleet import COLUMNS, gpu_health_lines, host_cells
from fleetdeck.tui.rows.host import HEALTH_COLUMNS, gpu_health_row
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views.fleet import layout_widths
from fleetdeck.tui.views.host import HostScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.recorded import NAMES, T, cell_text, feed

FIXTURE = Path(__file__).parents[1] / "support" / "fixtures" / "fleet-health.json"


def health_fleet():
    return fleet_from_json(json.loads(FIXTURE.read_text()))


def health_app() -> FleetdeckApp:
    fleet = parse_fleet("".join(f"[hosts.{n}]\nlocal = true\n" for n in NAMES), "fixture")
    return FleetdeckApp(
        fleet, RecordedSource([health_fleet(), health_fleet()]), autopoll=False, clock=lambda: T
    )


def gpu_cell(width: int, host: str) -> list[str]:
    st = FleetState(list(NAMES), 5.0, clock=lambda: T)
    st.apply(health_fleet())
    w = layout_widths(width)
    cells, _ = host_cells(st, host, w)
    return cells[[k for k in COLUMNS if k in w].index("gpus")].plain.split("\n")


def test_the_fleet_row_shows_temperature_power_and_the_throttle_reason_as_room_allows():
    # 160 columns: temperature, power, and the mark with its reason in words; a card that is
    # not throttled has no mark; a card that reports no power shows its temperature alone
    assert gpu_cell(160, "ana-ml2") == [
        "0 ██████  75/80G 84° 689W ▼thermal     █",
        "1 █░░░░░  20/80G 52° 181W              ▃",
    ]
    assert gpu_cell(160, "gx10") == ["0U███░░░  65/120G 48°                   ▅"]
    # 120 columns: the temperature, and the mark alone
    assert gpu_cell(120, "ana-ml2")[0] == "0 ██████  75/80G 84° ▼     █"
    # 80 columns: only the mark; the line under the table has the words
    assert gpu_cell(80, "ana-ml2")[0] == "0 ██████  75/80G ▼   █"


def test_the_line_under_the_table_names_the_reason_and_each_recent_xid(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        g = Gpu(
            index=3,
            name="H200",
            uuid="u",
            unified_memory=False,
            memory_total_mib=1,
            memory_used_mib=1,
            utilization_pct=0,
            throttle_reasons=("sw-power-cap",),
            xid=(Xid(T, 79),),
        )
        lines = gpu_health_lines(HostSnapshot(name="h", reachable=True, gpus=(g,)))
        assert lines == [
            ("▼ GPU3 throttled: power cap", "yellow"),
            ("✖ GPU3 Xid 79 at 13:00:00: GPU has fallen off the bus (reboot the host)", "bold red"),
        ]
        assert (
            gpu_health_lines(
                HostSnapshot(
                    name="h",
                    reachable=True,
                    gpus=(
                        Gpu(
                            index=0,
                            name="x",
                            uuid="u",
                            unified_memory=False,
                            memory_total_mib=1,
                            memory_used_mib=1,
                            utilization_pct=None,
                        ),
                    ),
                )
            )
            == []
        )
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_the_health_row_says_each_figure_and_a_dash_for_what_the_driver_does_not_report():
    full = Gpu(
        index=0,
        name="H200",
        uuid="u",
        unified_memory=False,
        memory_total_mib=1,
        memory_used_mib=1,
        utilization_pct=97,
        temperature_c=61,
        temperature_slowdown_c=89,
        power_w=612.4,
        power_limit_w=700.0,
        sm_clock_mhz=1755,
        sm_clock_max_mhz=1980,
        mem_clock_mhz=3201,
        throttle_reasons=("sw-power-cap",),
        pcie=GpuPcie(
            gen=4, width=8, width_max=16, tx_bytes_s=1.5e9, rx_bytes_s=2 * 2**20, sampled_at=T
        ),
        ecc=GpuEcc(mode="enabled", corrected=3, uncorrected=1, pending_retirement=True),
        persistence_mode=True,
        mig_mode=False,
        compute_mode="default",
        fan_pct=40,
        xid=(),
    )
    row = dict(
        zip([c for c, _ in HEALTH_COLUMNS], (c.plain for c in gpu_health_row(full)), strict=True)
    )
    assert row == {
        "gpu": "GPU 0",
        "temp": "61°/89°",
        "power": "612/700W",
        "clocks": "1755/1980 · 3201",
        "throttle": "power cap",
        "pcie": "gen4 x8 (of x16) · tx 1.4G/s rx 2.0M/s",
        "ecc": "on · 3 corr / 1 unc · remap pending",
        "modes": "persist on · MIG off · default",
        "fan": "40%",
        "xid": "none",
    }
    silent = Gpu(
        index=1,
        name="GB10",
        uuid="u",
        unified_memory=True,
        memory_total_mib=1,
        memory_used_mib=1,
        utilization_pct=None,
    )
    assert [c.plain for c in gpu_health_row(silent)] == [
        "GPU 1",
        "-/-",
        "-/-W",
        "?",
        "-",
        "-",
        "-/- · -",
        "-",
        "-",
        "-",
    ]


async def test_the_host_view_has_a_health_panel_and_each_process_its_sm_share():
    app = health_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table", KeyedTable)
        assert "▼thermal" in cell_text(table, "ana-ml2", "gpus")
        await pilot.press("j")
        await pilot.pause()
        detail = str(app.screen.query_one("#fleet-detail", Static).render())
        assert "▼ GPU0 throttled: power cap, thermal (hardware)" in detail
        await pilot.press("enter")
        assert isinstance(app.screen, HostScreen)
        health = app.screen.query_one("#host-gpu-health", KeyedTable)
        assert health.keys == ["gpu0", "gpu1"]
        assert cell_text(health, "gpu0", "temp") == "84°/87°"
        assert cell_text(health, "gpu0", "throttle") == "power cap, thermal (hardware)"
        assert cell_text(health, "gpu1", "ecc") == "on · 3 corr / 0 unc · remap pending"
        gpus = app.screen.query_one("#host-gpus", KeyedTable)
        assert cell_text(gpus, "gpu0:2211", "util") == "sm 71%"
        summary = str(app.screen.query_one("#host-summary", Static).render())
        assert "▼ GPU0 throttled: power cap, thermal (hardware)" in summary


@pytest.mark.parametrize("press", [(), ("j", "enter")], ids=["fleet", "host"])
def test_gpu_health_snapshots(snap_compare, press):
    assert snap_compare(health_app(), terminal_size=(160, 40), run_before=_fed, press=list(press))


async def _fed(pilot):
    await feed(pilot.app, pilot)
