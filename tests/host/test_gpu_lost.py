"""A card the driver lost (NVML "GPU is lost"): the probe's `lost` crosses the boundary, the
screens say LOST with the driver's words instead of a 0 of 0 memory bar, /metrics has
`fleetdeck_gpu_lost` 1 and no memory sample for it, and the alert rules file pages on it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, HostSnapshot
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.monitor.metrics.export import FleetCollector
from fleetdeck.backend.monitor.metrics.rules import rules_file

T = 1_800_000_000.0


def _probe(lost) -> dict:
    return {
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "uuid": "GPU-0",
                "unified_memory": False,
                "memory_total_mib": None,
                "memory_used_mib": None,
                "utilization_pct": None,
                "processes": [],
                "lost": lost,
                "xid": [],
            },
            {
                "index": 1,
                "name": "NVIDIA H200",
                "uuid": "GPU-1",
                "unified_memory": False,
                "memory_total_mib": 143771.0,
                "memory_used_mib": 1000.0,
                "utilization_pct": 3.0,
                "processes": [],
            },
        ]
    }


def test_lost_crosses_the_boundary_and_a_hostile_value_is_dropped_not_the_card():
    h = host_from_probe("h1", _probe("GPU is lost"), 1.0, T)
    assert [g.lost for g in h.gpus] == ["GPU is lost", None]
    for bad in (1, ["x"], {"a": 1}):
        h = host_from_probe("h1", _probe(bad), 1.0, T)
        assert len(h.gpus) == 2 and h.gpus[0].lost is None
    long = host_from_probe("h1", _probe("x" * 10_000), 1.0, T).gpus[0].lost
    assert long is not None and len(long) <= 200


def test_metrics_say_lost_and_give_no_memory_sample_for_it():
    h = host_from_probe("h1", _probe("GPU is lost"), 1.0, T)
    c = FleetCollector()
    c.update(FleetSnapshot(hosts=(h,), time=T), [], {})
    reg = CollectorRegistry()
    reg.register(c)
    text = generate_latest(reg).decode()
    assert 'fleetdeck_gpu_lost{gpu="0",host="h1",uuid="GPU-0"} 1.0' in text
    assert 'fleetdeck_gpu_lost{gpu="1",host="h1",uuid="GPU-1"} 0.0' in text
    totals = [
        line for line in text.splitlines() if line.startswith("fleetdeck_gpu_memory_total_bytes{")
    ]
    assert len(totals) == 1 and 'gpu="1"' in totals[0]
    assert "fleetdeck_gpu_lost == 1" in rules_file()


def test_status_says_lost_with_the_drivers_words_escaped():
    from fleetdeck.cli.status import _gpu_cell

    h = HostSnapshot(
        name="h1",
        reachable=True,
        time=T,
        gpus=(
            Gpu(
                index=0,
                name="H200",
                uuid="GPU-0",
                unified_memory=False,
                memory_total_mib=0.0,
                memory_used_mib=0.0,
                utilization_pct=None,
                lost="GPU is lost\x1b[2J",
            ),
            Gpu(
                index=1,
                name="H200",
                uuid="GPU-1",
                unified_memory=False,
                memory_total_mib=2048.0,
                memory_used_mib=1024.0,
                utilization_pct=1.0,
            ),
        ),
    )
    console = Console(width=120, record=True, color_system=None)
    console.print(_gpu_cell(h))
    out = console.export_text()
    assert "0: LOST (GPU is lost\\x1b[2J)" in out and "\x1b" not in out
    assert "1: 1.0G/2.0G 50%" in out.replace("GiB", "G")


def _lost_fleet_app():
    """The dashboard over the recorded fleet with the first GPU host's card 0 lost:
    (app, that host's name, the lost card's index)."""
    from dataclasses import replace

    from support.recorded import app_over, recorded

    snap = recorded("fleet.json")
    hosts = list(snap.hosts)
    i = next(n for n, h in enumerate(hosts) if h.gpus)
    gpus = list(hosts[i].gpus)
    gpus[0] = replace(
        gpus[0], lost="GPU is lost", memory_total_mib=0.0, memory_used_mib=0.0, processes=()
    )
    hosts[i] = replace(hosts[i], gpus=tuple(gpus))
    return app_over(replace(snap, hosts=tuple(hosts))), hosts[i].name, gpus[0].index


async def test_the_fleet_view_says_lost_not_zero_of_zero():
    from support.recorded import feed

    app, name, index = _lost_fleet_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed(app, pilot)
        table = app.screen.query_one("#fleet-table")
        cell = table.get_cell(name, "gpus")
        text = cell.plain if hasattr(cell, "plain") else str(cell)
        assert "LOST: GPU is lost" in text and "0/0G" not in text


async def test_the_host_view_says_lost_not_zero_of_zero():
    from support.recorded import feed

    app, name, index = _lost_fleet_app()
    async with app.run_test(size=(140, 50)) as pilot:
        await feed(app, pilot)
        app.open_host(name)
        await pilot.pause()
        table = app.screen.query_one("#host-gpus")
        row = table.get_row(f"gpu{index}")
        text = " ".join(c.plain if hasattr(c, "plain") else str(c) for c in row)
        assert "LOST: GPU is lost" in text and "0/0 MiB" not in text


def test_an_unreported_memory_total_is_unknown_not_zero():
    """A card the host answered for without its memory figures (not lost): null in the JSON, no
    sample on /metrics, `?` in the views, never `0`."""
    from fleetdeck.cli.status import _gpu_cell
    from fleetdeck.tui.rows.host import gpu_rows

    probe = _probe(None)
    h = host_from_probe("h1", probe, 1.0, T)
    g = h.gpus[0]
    assert g.lost is None and g.memory_total_mib is None and g.memory_used_mib is None
    assert h.to_json()["gpus"][0]["memory_total_mib"] is None
    c = FleetCollector()
    c.update(FleetSnapshot(hosts=(h,), time=T), [], {})
    reg = CollectorRegistry()
    reg.register(c)
    text = generate_latest(reg).decode()
    for metric in ("gpu_memory_total_bytes", "gpu_memory_used_bytes"):
        lines = [x for x in text.splitlines() if x.startswith(f"fleetdeck_{metric}{{")]
        assert lines and all('gpu="0"' not in x for x in lines), lines
    console = Console(width=120, record=True, color_system=None)
    console.print(_gpu_cell(h))
    out = console.export_text()
    assert "0: ?/? ?%" in out and "0B" not in out
    rows, _health = gpu_rows(h)
    assert "?/? MiB" in str(rows["gpu0"][2])
