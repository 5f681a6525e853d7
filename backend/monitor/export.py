"""Prometheus exposition of the fleet (`fleetdeck watch --prometheus ADDR:PORT`).

Names follow node_exporter and dcgm-exporter habits: a `fleetdeck_` prefix, base units in the
name (`_bytes`, `_seconds`), and a `host` label on every per-host series. The collector reads
the watcher's latest snapshot at scrape time, so a run, seat or alert that went away is simply
absent from the next scrape (no stale label sets to clean up).

What a host says reaches the exposition through two rules: every label value through `label`,
every sample value through `sample` (docs/probe.md, "Sinks"). A family is built by `_Family`,
which applies both, so no series can skip them.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.prom_rules import run_figures
from fleetdeck.backend.monitor.seats import attribute_memory

MIB = 2**20


@dataclass
class Latest:
    """What the next scrape shows: the last poll, the firing alerts, the last seat checks."""

    snap: FleetSnapshot | None = None
    firing: list[Any] = field(default_factory=list)
    checks: Mapping[str, Any] = field(default_factory=dict)
    polls: int = 0


class FleetCollector(Collector):
    """A prometheus-client collector over the watcher's latest poll."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest = Latest()

    def update(self, snap: FleetSnapshot, firing: list[Any], checks: Mapping[str, Any]) -> None:
        """Replace what the next scrape shows (called by the poll loop)."""
        with self._lock:
            self._latest = Latest(snap, list(firing), dict(checks), self._latest.polls + 1)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = self._latest
        yield from fleet_metrics(latest)


#: the longest label value, in characters
LABEL_MAX = 512


def label(v: Any) -> str:
    """Any host string as a label value: `shown` (printable UTF-8: a non-UTF-8 byte as `\\xNN`,
    a control character as `\\x1b`, a backslash doubled), at most `LABEL_MAX` characters (a
    longer one keeps its head and a hash of the whole, so two series stay two)."""
    s = shown("" if v is None else v if isinstance(v, str) else str(v))
    if len(s) > LABEL_MAX:
        s = s[: LABEL_MAX - 17] + "..." + hashlib.sha256(s.encode()).hexdigest()[:14]
    return s


def sample(v: Any) -> float | None:
    """Any host number as a sample value, or None (no sample): a float, NaN and the infinities
    included (Prometheus carries them as `NaN`, `+Inf`, `-Inf`: a loss that went NaN is shown as
    NaN); an integer past a float's range as the infinity of its sign; a non-number (None, a
    string, a boolean) is no sample."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


class _Family(GaugeMetricFamily):
    """A gauge whose every label value and sample value pass through `label` and `sample`."""

    def add_metric(self, labels: Any, value: Any, timestamp: Any = None) -> None:
        v = sample(value)
        if v is not None:
            super().add_metric([label(x) for x in labels], v, timestamp)

    def add_labelled(self, labels: list[str], value: Any) -> None:
        """As `add_metric`, the labels already passed through `label` (a card's, once for all
        its families)."""
        v = sample(value)
        if v is not None:
            GaugeMetricFamily.add_metric(self, labels, v)


def _g(name: str, doc: str, labels: list[str]) -> _Family:
    return _Family(f"fleetdeck_{name}", doc, labels=labels)


#: the per-GPU health families, one per figure: (figure: a Gpu attribute, `pcie.gen` for a
#: nested one; our name; help; the scale to base units; dcgm-exporter's field for the same
#: figure, docs/probe.md ("In /metrics") lists them side by side)
GPU_FIGURES = (
    (
        "memory_util_pct",
        "gpu_memory_utilization_percent",
        "memory controller busy",
        1,
        "DCGM_FI_DEV_MEM_COPY_UTIL",
    ),
    ("temperature_c", "gpu_temperature_celsius", "GPU temperature", 1, "DCGM_FI_DEV_GPU_TEMP"),
    (
        "temperature_slowdown_c",
        "gpu_slowdown_temperature_celsius",
        "temperature at which the GPU slows down",
        1,
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
    ),
    (
        "temperature_shutdown_c",
        "gpu_shutdown_temperature_celsius",
        "temperature at which the GPU shuts down",
        1,
        "DCGM_FI_DEV_SHUTDOWN_TEMP",
    ),
    ("power_w", "gpu_power_watts", "power draw", 1, "DCGM_FI_DEV_POWER_USAGE"),
    (
        "power_limit_w",
        "gpu_power_limit_watts",
        "enforced power limit",
        1,
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    ),
    ("sm_clock_mhz", "gpu_sm_clock_hertz", "SM clock", 1e6, "DCGM_FI_DEV_SM_CLOCK"),
    (
        "sm_clock_max_mhz",
        "gpu_sm_clock_max_hertz",
        "SM clock's maximum",
        1e6,
        "DCGM_FI_DEV_MAX_SM_CLOCK",
    ),
    ("mem_clock_mhz", "gpu_memory_clock_hertz", "memory clock", 1e6, "DCGM_FI_DEV_MEM_CLOCK"),
    (
        "mem_clock_max_mhz",
        "gpu_memory_clock_max_hertz",
        "memory clock's maximum",
        1e6,
        "DCGM_FI_DEV_MAX_MEM_CLOCK",
    ),
    ("fan_pct", "gpu_fan_percent", "fan speed", 1, "DCGM_FI_DEV_FAN_SPEED"),
    (
        "pcie.gen",
        "gpu_pcie_link_generation",
        "PCIe link generation",
        1,
        "DCGM_FI_DEV_PCIE_LINK_GEN",
    ),
    (
        "pcie.width",
        "gpu_pcie_link_width",
        "PCIe link width (lanes)",
        1,
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    ),
    (
        "pcie.tx_bytes_s",
        "gpu_pcie_tx_bytes_per_second",
        "PCIe transmit throughput (a sample)",
        1,
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    ),
    (
        "pcie.rx_bytes_s",
        "gpu_pcie_rx_bytes_per_second",
        "PCIe receive throughput (a sample)",
        1,
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    ),
    (
        "ecc.pending_retirement",
        "gpu_ecc_pending_retirement",
        "1 when rows or pages wait for a reset",
        1,
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
    ),
    (
        "ecc.remap_failure",
        "gpu_row_remap_failure",
        "1 when a row remap failed",
        1,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ),
    ("ecc.mode", "gpu_ecc_mode", "1 when ECC is enabled", 1, "DCGM_FI_DEV_ECC_CURRENT"),
    (
        "persistence_mode",
        "gpu_persistence_mode",
        "1 when persistence mode is on",
        1,
        "DCGM_FI_DEV_PERSISTENCE_MODE",
    ),
    ("mig_mode", "gpu_mig_mode", "1 when MIG is on", 1, "DCGM_FI_DEV_MIG_MODE"),
)
GPU = ["host", "gpu", "uuid"]
#: the families with a label of their own: key -> (our name, help, extra label, dcgm-exporter's)
GPU_LABELLED = {
    "throttle": (
        "gpu_throttle_reason",
        "1 for each clock event (throttle) reason active",
        "reason",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    ),
    "ecc_corrected": (
        "gpu_ecc_corrected_errors",
        "corrected ECC errors",
        "counter",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    ),
    "ecc_uncorrected": (
        "gpu_ecc_uncorrected_errors",
        "uncorrected ECC errors",
        "counter",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    ),
    "remapped": (
        "gpu_remapped_rows",
        "rows remapped",
        "cause",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ),
    "xid": (
        "gpu_xid_errors",
        "Xid errors the probe read in the last hour",
        "code",
        "DCGM_FI_DEV_XID_ERRORS",
    ),
    "compute": (
        "gpu_compute_mode",
        "1 for the GPU's compute mode",
        "mode",
        "DCGM_FI_DEV_COMPUTE_MODE",
    ),
}


def _gpu_families() -> dict[str, _Family]:
    fams = {key: _g(name, doc, GPU) for key, name, doc, _scale, _dcgm in GPU_FIGURES}
    fams.update(
        {
            key: _g(name, doc, [*GPU, extra])
            for key, (name, doc, extra, _dcgm) in GPU_LABELLED.items()
        }
    )
    return fams


def _figure(g: Any, key: str) -> Any:
    part, _, field = key.partition(".")
    v = getattr(getattr(g, part), field) if field else getattr(g, part)
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if key == "ecc.mode":
        return None if v is None else 1.0 if v == "enabled" else 0.0
    return v


def _gpu_health(m: dict[str, Any], lab: list[str], g: Any) -> None:
    ready = [label(x) for x in lab]  # the card's labels, made once for its thirty-odd series
    for key, _name, _doc, scale, _dcgm in GPU_FIGURES:
        v = sample(_figure(g, key))
        m[key].add_labelled(ready, None if v is None else v * scale)
    for r in g.throttle_reasons or ():
        m["throttle"].add_labelled([*ready, label(r)], 1.0)
    e = g.ecc
    for counter, cor, unc in (
        ("volatile", e.corrected, e.uncorrected),
        ("aggregate", e.corrected_aggregate, e.uncorrected_aggregate),
    ):
        m["ecc_corrected"].add_labelled([*ready, counter], cor)
        m["ecc_uncorrected"].add_labelled([*ready, counter], unc)
    m["remapped"].add_labelled([*ready, "correctable"], e.remapped_correctable)
    m["remapped"].add_labelled([*ready, "uncorrectable"], e.remapped_uncorrectable)
    codes: dict[int, int] = {}
    for x in g.xid or ():
        codes[x.code] = codes.get(x.code, 0) + 1
    for code, n in sorted(codes.items()):
        m["xid"].add_labelled([*ready, str(code)], n)
    if g.compute_mode is not None:
        m["compute"].add_labelled([*ready, label(g.compute_mode)], 1.0)


def fleet_metrics(latest: Latest) -> list[Metric]:
    """Every metric family for one poll (families are present even when empty)."""
    m = {
        "up": _g("host_up", "1 when the host answered the last poll", ["host"]),
        "lat": _g("host_latency_seconds", "round trip of the last poll", ["host"]),
        "mem_used": _g("host_memory_used_bytes", "system memory in use", ["host"]),
        "mem_total": _g("host_memory_total_bytes", "system memory", ["host"]),
        "gpu_used": _g("gpu_memory_used_bytes", "GPU memory in use", ["host", "gpu", "uuid"]),
        "gpu_total": _g("gpu_memory_total_bytes", "GPU memory", ["host", "gpu", "uuid"]),
        "gpu_util": _g("gpu_utilization_percent", "GPU utilisation", ["host", "gpu", "uuid"]),
        "gpu_room": _g(
            "gpu_headroom_bytes", "GPU memory not held by any process", ["host", "gpu", "uuid"]
        ),
        "gpu_unified": _g(
            "gpu_unified_memory", "1 when the GPU has no memory of its own (system memory)", GPU
        ),
        "gpu_lost": _g(
            "gpu_lost",
            "1 when the driver lost the GPU (NVML: GPU is lost); its figures have no sample",
            GPU,
        ),
        **_gpu_families(),
        "disk_free": _g(
            "disk_free_bytes", "free space behind a configured root", ["host", "path", "mount"]
        ),
        "disk_size": _g(
            "disk_size_bytes", "size of the filesystem behind a root", ["host", "path", "mount"]
        ),
        "run_state": _g(
            "run_state", "1 for the run's current state", ["host", "run", "path", "state"]
        ),
        "run_step": _g("run_step", "last logged step", ["host", "run", "path"]),
        "run_max": _g("run_max_steps", "steps the run will take", ["host", "run", "path"]),
        "run_loss": _g("run_loss", "last training loss", ["host", "run", "path"]),
        "run_eval": _g("run_eval_loss", "last eval loss", ["host", "run", "path"]),
        "run_eta": _g(
            "run_eta_seconds", "time left at the current step time", ["host", "run", "path"]
        ),
        # the verdicts' figures `fleetdeck rules --prometheus` reads (prom_rules.run_figures)
        "run_nonfinite": _g(
            "run_loss_nonfinite",
            "1 when the run logged a NaN or infinite loss",
            ["host", "run", "path"],
        ),
        "run_rises": _g(
            "run_eval_loss_rises",
            "consecutive evals, newest back, at which eval loss rose",
            ["host", "run", "path"],
        ),
        "run_spike": _g(
            "run_loss_spike_ratio",
            "last loss over the median of the (up to 20) before it",
            ["host", "run", "path"],
        ),
        "stray": _g("schedules_stray", "stray schedules on the host", ["host"]),
        "seat_up": _g(
            "seat_up", "1 when the seat's process is seen", ["host", "port", "kind", "model"]
        ),
        "seat_mem": _g("seat_memory_bytes", "GPU memory the seat holds", ["host", "port", "kind"]),
        "seat_gpu_mem": _g(
            "seat_gpu_memory_bytes",
            "GPU memory the seat holds on one GPU",
            ["host", "port", "kind", "gpu"],
        ),
        "seat_restarts": _g("seat_restarts", "container restart count", ["host", "port", "kind"]),
        "seat_check": _g(
            "seat_check_ok", "1 when the last seat check was sound", ["host", "port", "signature"]
        ),
        "alert": _g(
            "alert_firing", "1 for each firing alert", ["rule", "host", "subject", "severity"]
        ),
        "alerts": _g("alerts_firing", "firing alerts in the fleet", []),
        "polls": _g("watch_polls", "polls since the watcher started", []),
        "last": _g("last_poll_timestamp_seconds", "when the last poll ended", []),
    }
    snap = latest.snap
    if snap is not None:
        m["polls"].add_metric([], latest.polls)
        m["last"].add_metric([], snap.time)
        for h in snap.hosts:
            _host(m, h)
    for _key, c in sorted(latest.checks.items()):
        m["seat_check"].add_metric(
            [c.host, str(c.port), c.signature or ""], 1.0 if c.sound else 0.0
        )
    for a in latest.firing:
        m["alert"].add_metric([a.rule, a.host, a.subject, getattr(a, "severity", "")], 1.0)
    m["alerts"].add_metric([], len(latest.firing))
    return list(m.values())


def _total(vs: Any) -> float:
    return sum(x for x in map(sample, vs) if x is not None)


def _host(m: dict[str, _Family], h: Any) -> None:
    # arithmetic runs on `sample`d values only: a host's 10**400 would raise in float maths
    n = h.name
    m["up"].add_metric([n], 1.0 if h.reachable else 0.0)
    if not h.reachable:
        return
    lat = sample(h.latency_ms)
    m["lat"].add_metric([n], None if lat is None else lat / 1000)
    m["mem_used"].add_metric([n], h.memory_used_bytes)
    m["mem_total"].add_metric([n], h.memory_total_bytes)
    gpus = tuple(
        replace(
            g, processes=tuple(replace(p, used_mib=sample(p.used_mib) or 0.0) for p in g.processes)
        )
        for g in h.gpus
    )
    for g in gpus:
        lab = [n, str(g.index), g.uuid]
        m["gpu_lost"].add_metric(lab, 0.0 if g.lost is None else 1.0)
        if g.lost is not None:  # every figure of it is unknown: no sample rather than a 0
            continue
        used, total = sample(g.memory_used_mib) or 0.0, sample(g.memory_total_mib) or 0.0
        m["gpu_used"].add_metric(lab, used * MIB)
        m["gpu_total"].add_metric(lab, total * MIB)
        m["gpu_util"].add_metric(lab, g.utilization_pct)
        held = max(used, _total(p.used_mib for p in g.processes))
        m["gpu_room"].add_metric(lab, max(0.0, total - held) * MIB)
        m["gpu_unified"].add_metric(lab, 1.0 if g.unified_memory else 0.0)
        _gpu_health(m, lab, g)
    seen = set()
    for d in h.disks:
        if d.error or d.path in seen:
            continue
        seen.add(d.path)
        m["disk_free"].add_metric([n, d.path, d.mount], d.free_bytes)
        m["disk_size"].add_metric([n, d.path, d.mount], d.total_bytes)
    for r in h.runs:
        lab = [n, r.name, r.path]
        m["run_state"].add_metric([*lab, r.state], 1.0)
        for key, v in (
            ("run_step", r.step),
            ("run_max", r.max_steps),
            ("run_loss", r.loss),
            ("run_eval", r.eval_loss),
            ("run_eta", r.eta_seconds),
        ):
            m[key].add_metric(lab, v)
        for key, v in zip(("run_nonfinite", "run_rises", "run_spike"), run_figures(r), strict=True):
            m[key].add_metric(lab, v)
    m["stray"].add_metric([n], sum(1 for s in h.schedules if s.stray))
    for s in attribute_memory(h.seats, gpus) if h.seats else ():
        port = str(s.port or "")
        m["seat_up"].add_metric([n, port, s.kind, s.model or ""], 1.0 if s.pid else 0.0)
        m["seat_mem"].add_metric(
            [n, port, s.kind], round(_total(s.memory_by_gpu.values()), 1) * MIB
        )
        m["seat_restarts"].add_metric([n, port, s.kind], s.restarts)
        for gpu, mib in sorted(s.memory_by_gpu.items()):
            m["seat_gpu_mem"].add_metric([n, port, s.kind, str(gpu)], (sample(mib) or 0.0) * MIB)


def serve_metrics(addr: str, port: int, collector: FleetCollector) -> tuple[Any, int]:
    """Serve /metrics on ADDR:PORT in a thread; (server, the port bound)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server, server.server_address[1]


def parse_listen(text: str) -> tuple[str, int]:
    """`ADDR:PORT` (or `[v6]:PORT`, or `:PORT` for every address) -> (addr, port); ValueError."""
    addr, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--prometheus wants ADDR:PORT, not {text!r}")
    addr = addr.strip("[]") or "0.0.0.0"
    return addr, int(port)


__all__ = [
    "FleetCollector",
    "Latest",
    "fleet_metrics",
    "label",
    "parse_listen",
    "sample",
    "serve_metrics",
]
