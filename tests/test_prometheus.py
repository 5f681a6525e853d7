"""The Prometheus exposition: served over real HTTP, scraped with a real client and parsed with
prometheus-client's own parser; per-GPU, per-run, per-seat and per-alert series with labels."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, Gpu, GpuProcess, HostSnapshot, Run
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.alerts import Alert
from fleetdeck.backend.monitor.export import FleetCollector, parse_listen, serve_metrics
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
    g = Gpu(index=0, name="H100", uuid="GPU-0f", unified_memory=False, memory_total_mib=81559,
            memory_used_mib=76000, utilization_pct=37,
            processes=(GpuProcess(pid=10, user="svc", used_mib=31000, command="vllm"),
                       GpuProcess(pid=20, user="svc", used_mib=43000, command="vllm")))
    seat = Seat(host="ana-ml2", kind="vllm", port=8052, model="q4", pid=20, pids=(20,), restarts=3)
    run = Run(host="ana-ml2", path="/tank/erp/run-7", name="run-7", state="running", step=75, max_steps=159,
              loss=2.91, eval_loss=3.172, eta_seconds=1570.8)
    disk = Disk(path="/tank/erp", mount="/tank", fstype="zfs", total_bytes=10 * 2**40, used_bytes=2**40,
                free_bytes=9 * 2**40)
    up = HostSnapshot(name="ana-ml2", reachable=True, time=1.0, latency_ms=41.0, gpus=(g,), runs=(run,),
                      disks=(disk,), seats=(seat,))
    down = HostSnapshot(name="nh3-dev", reachable=False, error="timed out", time=1.0)
    return FleetSnapshot(hosts=(up, down), time=1.0)


def test_the_scrape_parses_and_labels_every_series(served):
    c, url = served
    assert scrape(url)["fleetdeck_host_up"] == []   # before the first poll: families, no samples
    check = SeatCheck(host="ana-ml2", port=8052, sound=False, signature="logprob-unserialisable", message="nan")
    c.update(snapshot(), [Alert("seat-check", "ana-ml2", "port 8052", "firing", 1.0, "nan")],
             {check.key: check})
    m = scrape(url)
    assert {s.labels["host"]: s.value for s in m["fleetdeck_host_up"]} == {"ana-ml2": 1.0, "nh3-dev": 0.0}
    (used,) = m["fleetdeck_gpu_memory_used_bytes"]
    assert used.labels == {"host": "ana-ml2", "gpu": "0", "uuid": "GPU-0f"} and used.value == 76000 * MIB
    (room,) = m["fleetdeck_gpu_headroom_bytes"]
    assert room.value == (81559 - 76000) * MIB
    assert m["fleetdeck_gpu_utilization_percent"][0].value == 37
    assert m["fleetdeck_run_step"][0].labels == {"host": "ana-ml2", "run": "run-7", "path": "/tank/erp/run-7"}
    assert [s.value for s in m["fleetdeck_run_eval_loss"]] == [3.172]
    assert [s.value for s in m["fleetdeck_run_eta_seconds"]] == [1570.8]
    assert [s.labels["state"] for s in m["fleetdeck_run_state"]] == ["running"]
    assert [s.value for s in m["fleetdeck_disk_free_bytes"]] == [9 * 2**40]
    assert [(s.labels["port"], s.value) for s in m["fleetdeck_seat_memory_bytes"]] == [("8052", 43000 * MIB)]
    assert [s.value for s in m["fleetdeck_seat_restarts"]] == [3]
    assert [(s.labels["signature"], s.value) for s in m["fleetdeck_seat_check_ok"]] == [("logprob-unserialisable", 0)]
    assert [s.labels for s in m["fleetdeck_alert_firing"]] == [
        {"rule": "seat-check", "host": "ana-ml2", "subject": "port 8052"}]
    assert every_host_series_has_a_host_label(m)
    # the next poll drops what went away: no stale series
    c.update(FleetSnapshot(hosts=(HostSnapshot(name="ana-ml2", reachable=True, time=2.0),), time=2.0), [], {})
    m = scrape(url)
    assert m["fleetdeck_run_step"] == [] and m["fleetdeck_alert_firing"] == []
    assert [s.value for s in m["fleetdeck_alerts_firing"]] == [0]


def every_host_series_has_a_host_label(m: dict[str, list]) -> bool:
    fleetwide = {"fleetdeck_alerts_firing", "fleetdeck_watch_polls", "fleetdeck_last_poll_timestamp_seconds"}
    return all("host" in s.labels for name, samples in m.items() if name not in fleetwide for s in samples)


@pytest.mark.parametrize("text,want", [("127.0.0.1:9464", ("127.0.0.1", 9464)), (":9464", ("0.0.0.0", 9464)),
                                       ("[::1]:9", ("::1", 9))])
def test_listen_addresses(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9464", "host:", "host:port", "h:70000"])
def test_bad_listen_addresses(text):
    with pytest.raises(ValueError):
        parse_listen(text)
