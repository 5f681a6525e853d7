"""The Prometheus exposition: served over real HTTP, scraped with a real client and parsed with
prometheus-client's own parser; per-GPU, per-run, per-seat and per-alert series with labels."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, GpuProcess, HostSnapshot, Run
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.metrics.export import FleetCollector, parse_listen, serve_metrics
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.seats import SeatCheck

MIB = 2**20


def scrape(url: str) -> dict[str, list]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.fixture
def served():
    c = FleetCollector()
    server, port = serve_metrics("127.0.0.1", 0, c)
    yield c, f"http://127.0.0.1:{port}/metrics"
    server.shutdown()
    server.server_close()


def snapshot() -> FleetSnapshot:
    g = Gpu(
        index=0,
        name="H100",
        uuid="GPU-0f",
        unified_memory=False,
        memory_total_mib=81559,
        memory_used_mib=76000,
        utilization_pct=37,
        processes=(
            GpuProcess(pid=10, user="svc", used_mib=31000, command="vllm"),
            GpuProcess(pid=20, user="svc", used_mib=43000, command="vllm"),
        ),
    )
    seat = Seat(host="ana-ml2", kind="vllm", port=8052, model="q4", pid=20, pids=(20,), restarts=3)
    run = Run(
        host="ana-ml2",
        path="/tank/erp/run-7",
        name="run-7",
        state="running",
        step=75,
        max_steps=159,
        loss=2.91,
        eval_loss=3.172,
        eta_seconds=1570.8,
    )
    disk = Disk(
        path="/tank/erp",
        mount="/tank",
        fstype="zfs",
        total_bytes=10 * 2**40,
        used_bytes=2**40,
        free_bytes=9 * 2**40,
    )
    up = HostSnapshot(
        name="ana-ml2",
        reachable=True,
        time=1.0,
        latency_ms=41.0,
        gpus=(g,),
        runs=(run,),
        disks=(disk,),
        seats=(seat,),
    )
    down = HostSnapshot(name="nh3-dev", reachable=False, error="timed out", time=1.0)
    return FleetSnapshot(hosts=(up, down), time=1.0)


def test_the_scrape_parses_and_labels_every_series(served):
    c, url = served
    assert scrape(url)["fleetdeck_host_up"] == []  # before the first poll: families, no samples
    check = SeatCheck(
        host="ana-ml2", port=8052, sound=False, signature="logprob-unserialisable", message="nan"
    )
    c.update(
        snapshot(),
        [Alert("seat-check", "ana-ml2", "port 8052", "firing", 1.0, "nan")],
        {check.key: check},
    )
    m = scrape(url)
    assert {s.labels["host"]: s.value for s in m["fleetdeck_host_up"]} == {
        "ana-ml2": 1.0,
        "nh3-dev": 0.0,
    }
    (used,) = m["fleetdeck_gpu_memory_used_bytes"]
    assert (
        used.labels == {"host": "ana-ml2", "gpu": "0", "uuid": "GPU-0f"}
        and used.value == 76000 * MIB
    )
    (room,) = m["fleetdeck_gpu_headroom_bytes"]
    assert room.value == (81559 - 76000) * MIB
    assert m["fleetdeck_gpu_utilization_percent"][0].value == 37
    assert m["fleetdeck_run_step"][0].labels == {
        "host": "ana-ml2",
        "run": "run-7",
        "path": "/tank/erp/run-7",
    }
    assert [s.value for s in m["fleetdeck_run_eval_loss"]] == [3.172]
    assert [s.value for s in m["fleetdeck_run_eta_seconds"]] == [1570.8]
    assert [s.labels["state"] for s in m["fleetdeck_run_state"]] == ["running"]
    assert [s.value for s in m["fleetdeck_disk_free_bytes"]] == [9 * 2**40]
    assert [(s.labels["port"], s.value) for s in m["fleetdeck_seat_memory_bytes"]] == [
        ("8052", 43000 * MIB)
    ]
    assert [s.value for s in m["fleetdeck_seat_restarts"]] == [3]
    assert [(s.labels["signature"], s.value) for s in m["fleetdeck_seat_check_ok"]] == [
        ("logprob-unserialisable", 0)
    ]
    assert [s.labels for s in m["fleetdeck_alert_firing"]] == [
        {"rule": "seat-check", "host": "ana-ml2", "subject": "port 8052", "severity": "critical"}
    ]
    assert every_host_series_has_a_host_label(m)
    # the next poll drops what went away: no stale series
    c.update(
        FleetSnapshot(hosts=(HostSnapshot(name="ana-ml2", reachable=True, time=2.0),), time=2.0),
        [],
        {},
    )
    m = scrape(url)
    assert m["fleetdeck_run_step"] == [] and m["fleetdeck_alert_firing"] == []
    assert [s.value for s in m["fleetdeck_alerts_firing"]] == [0]


def every_host_series_has_a_host_label(m: dict[str, list]) -> bool:
    fleetwide = {
        "fleetdeck_alerts_firing",
        "fleetdeck_watch_polls",
        "fleetdeck_last_poll_timestamp_seconds",
    }
    return all(
        "host" in s.labels for name, samples in m.items() if name not in fleetwide for s in samples
    )


@pytest.mark.parametrize(
    "text,want",
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        (":9464", ("0.0.0.0", 9464)),
        ("[::1]:9", ("::1", 9)),
    ],
)
def test_listen_addresses(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9464", "host:", "host:port", "h:70000"])
def test_bad_listen_addresses(text):
    with pytest.raises(ValueError):
        parse_listen(text)


def test_gpu_health_families_one_per_figure_in_base_units_and_none_is_no_sample(served):
    """Each health figure is its own family (in base units: hertz, watts, celsius, bytes per
    second); what the driver does not report is no sample, never 0; a card that reports
    nothing leaves every health family empty."""
    from fleetdeck.backend.fleet.models import GpuEcc, GpuPcie, Xid
    from fleetdeck.backend.monitor.metrics.gpu import GPU_FIGURES, GPU_LABELLED

    c, url = served
    g = Gpu(
        index=0,
        name="H200",
        uuid="GPU-a",
        unified_memory=False,
        memory_total_mib=143771,
        memory_used_mib=10859,
        utilization_pct=97,
        memory_util_pct=31,
        temperature_c=61,
        temperature_slowdown_c=89,
        temperature_shutdown_c=95,
        power_w=612.4,
        power_limit_w=700.0,
        sm_clock_mhz=1755,
        sm_clock_max_mhz=1980,
        mem_clock_mhz=3201,
        mem_clock_max_mhz=3201,
        throttle_reasons=("sw-power-cap", "hw-thermal-slowdown"),
        fan_pct=None,
        pcie=GpuPcie(gen=5, width=16, tx_bytes_s=1.5e9, rx_bytes_s=None),
        ecc=GpuEcc(
            mode="enabled",
            corrected=3,
            uncorrected=1,
            corrected_aggregate=7,
            uncorrected_aggregate=None,
            pending_retirement=True,
            remapped_correctable=2,
            remapped_uncorrectable=1,
            remap_failure=False,
        ),
        persistence_mode=True,
        compute_mode="default",
        mig_mode=False,
        xid=(Xid(1.0, 79), Xid(2.0, 79), Xid(3.0, 13)),
    )
    silent = Gpu(
        index=1,
        name="GB10",
        uuid="GPU-b",
        unified_memory=True,
        memory_total_mib=1,
        memory_used_mib=1,
        utilization_pct=None,
    )
    h = HostSnapshot(name="h", reachable=True, time=1.0, gpus=(g, silent))
    c.update(FleetSnapshot(hosts=(h,), time=1.0), [], {})
    m = scrape(url)

    def one(name: str) -> dict:
        return {
            tuple(v for k, v in sorted(s.labels.items()) if k not in ("host", "uuid")): s.value
            for s in m[name]
        }

    assert one("fleetdeck_gpu_temperature_celsius") == {("0",): 61}
    assert one("fleetdeck_gpu_slowdown_temperature_celsius") == {("0",): 89}
    assert one("fleetdeck_gpu_shutdown_temperature_celsius") == {("0",): 95}
    assert one("fleetdeck_gpu_power_watts") == {("0",): 612.4} and one(
        "fleetdeck_gpu_power_limit_watts"
    ) == {("0",): 700}
    assert one("fleetdeck_gpu_sm_clock_hertz") == {("0",): 1755e6} and one(
        "fleetdeck_gpu_sm_clock_max_hertz"
    ) == {("0",): 1980e6}
    assert one("fleetdeck_gpu_memory_clock_hertz") == {("0",): 3201e6}
    assert one("fleetdeck_gpu_memory_utilization_percent") == {("0",): 31}
    assert one("fleetdeck_gpu_fan_percent") == {}  # not reported: no sample, not 0
    assert one("fleetdeck_gpu_pcie_link_generation") == {("0",): 5} and one(
        "fleetdeck_gpu_pcie_link_width"
    ) == {("0",): 16}
    assert one("fleetdeck_gpu_pcie_tx_bytes_per_second") == {("0",): 1.5e9}
    assert one("fleetdeck_gpu_pcie_rx_bytes_per_second") == {}
    assert one("fleetdeck_gpu_throttle_reason") == {
        ("0", "hw-thermal-slowdown"): 1,
        ("0", "sw-power-cap"): 1,
    }
    assert one("fleetdeck_gpu_ecc_corrected_errors") == {
        ("volatile", "0"): 3,
        ("aggregate", "0"): 7,
    }
    assert one("fleetdeck_gpu_ecc_uncorrected_errors") == {("volatile", "0"): 1}
    assert one("fleetdeck_gpu_remapped_rows") == {
        ("correctable", "0"): 2,
        ("uncorrectable", "0"): 1,
    }
    assert one("fleetdeck_gpu_ecc_pending_retirement") == {("0",): 1} and one(
        "fleetdeck_gpu_row_remap_failure"
    ) == {("0",): 0}
    assert one("fleetdeck_gpu_ecc_mode") == {("0",): 1} and one(
        "fleetdeck_gpu_persistence_mode"
    ) == {("0",): 1}
    assert one("fleetdeck_gpu_mig_mode") == {("0",): 0}
    assert one("fleetdeck_gpu_compute_mode") == {("0", "default"): 1}
    assert one("fleetdeck_gpu_xid_errors") == {("13", "0"): 1, ("79", "0"): 2}
    names = [f"fleetdeck_{n}" for _k, n, *_ in GPU_FIGURES] + [
        f"fleetdeck_{v[0]}" for v in GPU_LABELLED.values()
    ]
    assert len(set(names)) == len(names) and all(n in m for n in names)
    assert all(
        s.labels["gpu"] == "0" for n in names for s in m[n]
    )  # the silent card: no sample anywhere


def test_docs_name_every_gpu_family_beside_dcgm_exporters_field():
    """docs/probe.md ("In /metrics") has a row for each GPU health family, naming on the same
    row the dcgm-exporter field(s) prom_gpu.py says measure the same figure."""
    from pathlib import Path

    from fleetdeck.backend.monitor.metrics.gpu import GPU_FIGURES, GPU_LABELLED

    doc = (Path(__file__).parents[2] / "docs" / "probe.md").read_text()
    section = doc[doc.index("### In /metrics") : doc.index("### The rules on them")]
    rows = [r for r in section.splitlines() if r.startswith("| `fleetdeck_")]
    pairs = [(name, dcgm) for _k, name, _d, _s, dcgm in GPU_FIGURES]
    pairs += [(name, dcgm) for name, _d, _x, dcgm in GPU_LABELLED.values()]
    for name, dcgm in pairs:
        row = next((r for r in rows if f"`fleetdeck_{name}`" in r), None)
        assert row is not None, f"fleetdeck_{name} is not in docs/probe.md"
        for field in dcgm.split(", "):
            assert f"`{field}`" in row, (name, field)
