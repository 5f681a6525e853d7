"""Prometheus exposition of the fleet (`fleetdeck watch --prometheus ADDR:PORT`).

Names follow node_exporter and dcgm-exporter habits: a `fleetdeck_` prefix, base units in the
name (`_bytes`, `_seconds`), and a `host` label on every per-host series. The collector reads
the watcher's latest snapshot at scrape time, so a run, seat or alert that went away is simply
absent from the next scrape (no stale label sets to clean up).

What a host says reaches the exposition through two rules, `label` and `sample`
(`values.py`); every family here is a `values.Family`, which applies both. The
per-GPU health families are built in `gpu.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.monitor.metrics.gpu import GPU, gpu_families, gpu_health
from fleetdeck.backend.monitor.metrics.rules import run_figures
from fleetdeck.backend.monitor.metrics.values import Family, gauge, sample
from fleetdeck.backend.monitor.seats import attribute_memory
from fleetdeck.backend.monitor.silences import SilenceStore

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
        #: silences.json, read again at a scrape only when it changed
        self._silences = SilenceStore()

    def update(self, snap: FleetSnapshot, firing: list[Any], checks: Mapping[str, Any]) -> None:
        """Replace what the next scrape shows (called by the poll loop)."""
        with self._lock:
            self._latest = Latest(snap, list(firing), dict(checks), self._latest.polls + 1)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = self._latest
            self._silences.refresh()
            active = self._silences.active()
        yield from fleet_metrics(latest)
        yield silence_family(active)


def fleet_metrics(latest: Latest) -> list[Metric]:
    """Every metric family for one poll (families are present even when empty)."""
    m = {
        "up": gauge("host_up", "1 when the host answered the last poll", ["host"]),
        "lat": gauge("host_latency_seconds", "round trip of the last poll", ["host"]),
        "mem_used": gauge("host_memory_used_bytes", "system memory in use", ["host"]),
        "mem_total": gauge("host_memory_total_bytes", "system memory", ["host"]),
        "gpu_used": gauge("gpu_memory_used_bytes", "GPU memory in use", ["host", "gpu", "uuid"]),
        "gpu_total": gauge("gpu_memory_total_bytes", "GPU memory", ["host", "gpu", "uuid"]),
        "gpu_util": gauge("gpu_utilization_percent", "GPU utilisation", ["host", "gpu", "uuid"]),
        "gpu_room": gauge(
            "gpu_headroom_bytes", "GPU memory not held by any process", ["host", "gpu", "uuid"]
        ),
        "gpu_unified": gauge(
            "gpu_unified_memory", "1 when the GPU has no memory of its own (system memory)", GPU
        ),
        "gpu_lost": gauge(
            "gpu_lost",
            "1 when the driver lost the GPU (NVML: GPU is lost); its figures have no sample",
            GPU,
        ),
        **gpu_families(),
        "disk_free": gauge(
            "disk_free_bytes", "free space behind a configured root", ["host", "path", "mount"]
        ),
        "disk_size": gauge(
            "disk_size_bytes", "size of the filesystem behind a root", ["host", "path", "mount"]
        ),
        "run_state": gauge(
            "run_state", "1 for the run's current state", ["host", "run", "path", "state"]
        ),
        "run_step": gauge("run_step", "last logged step", ["host", "run", "path"]),
        "run_max": gauge("run_max_steps", "steps the run will take", ["host", "run", "path"]),
        "run_loss": gauge("run_loss", "last training loss", ["host", "run", "path"]),
        "run_eval": gauge("run_eval_loss", "last eval loss", ["host", "run", "path"]),
        "run_eta": gauge(
            "run_eta_seconds", "time left at the current step time", ["host", "run", "path"]
        ),
        # the verdicts' figures `fleetdeck rules --prometheus` reads (rules.run_figures)
        "run_nonfinite": gauge(
            "run_loss_nonfinite",
            "1 when the run logged a NaN or infinite loss",
            ["host", "run", "path"],
        ),
        "run_rises": gauge(
            "run_eval_loss_rises",
            "consecutive evals, newest back, at which eval loss rose",
            ["host", "run", "path"],
        ),
        "run_spike": gauge(
            "run_loss_spike_ratio",
            "last loss over the median of the (up to 20) before it",
            ["host", "run", "path"],
        ),
        "stray": gauge("schedules_stray", "stray schedules on the host", ["host"]),
        "seat_up": gauge(
            "seat_up", "1 when the seat's process is seen", ["host", "port", "kind", "model"]
        ),
        "seat_mem": gauge(
            "seat_memory_bytes", "GPU memory the seat holds", ["host", "port", "kind"]
        ),
        "seat_gpu_mem": gauge(
            "seat_gpu_memory_bytes",
            "GPU memory the seat holds on one GPU",
            ["host", "port", "kind", "gpu"],
        ),
        "seat_restarts": gauge(
            "seat_restarts", "container restart count", ["host", "port", "kind"]
        ),
        "seat_check": gauge(
            "seat_check_ok", "1 when the last seat check was sound", ["host", "port", "signature"]
        ),
        "alert": gauge(
            "alert_firing", "1 for each firing alert", ["rule", "host", "subject", "severity"]
        ),
        "alerts": gauge("alerts_firing", "firing alerts in the fleet", []),
        "polls": gauge("watch_polls", "polls since the watcher started", []),
        "last": gauge("last_poll_timestamp_seconds", "when the last poll ended", []),
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


def silence_family(active: list[Any]) -> Metric:
    """`fleetdeck_silence_active{id, host, rule, subject, ends}` 1 for each silence in force, so a
    fleet that outgrew the screen sees its maintenance windows beside the alerts."""
    fam = gauge(
        "silence_active",
        "1 for each fleetdeck silence in force",
        ["id", "host", "rule", "subject", "ends"],
    )
    for s in sorted(active, key=lambda s: s.id):
        fam.add_metric([s.id, s.host or "", s.rule or "", s.subject or "", f"{s.ends:.0f}"], 1.0)
    return fam


def _total(vs: Any) -> float:
    return sum(x for x in map(sample, vs) if x is not None)


def _host(m: dict[str, Family], h: Any) -> None:
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
        # a figure the host did not report is absent, never a 0
        used, total = sample(g.memory_used_mib), sample(g.memory_total_mib)
        if used is not None:
            m["gpu_used"].add_metric(lab, used * MIB)
        if total is not None:
            m["gpu_total"].add_metric(lab, total * MIB)
        m["gpu_util"].add_metric(lab, g.utilization_pct)
        held = max(used or 0.0, _total(p.used_mib for p in g.processes))
        if total is not None:
            m["gpu_room"].add_metric(lab, max(0.0, total - held) * MIB)
        m["gpu_unified"].add_metric(lab, 1.0 if g.unified_memory else 0.0)
        gpu_health(m, lab, g)
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
    "parse_listen",
    "serve_metrics",
]
