"""Frozen snapshots of the fleet: what the probe saw, shaped as the contract's JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

RUN_STATES = ("running", "finished", "failed", "stalled", "queued", "cancelled", "unknown")
SCHEDULE_KINDS = ("crontab", "cron-file", "systemd-timer", "at", "loop")


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    user: str
    used_mib: float
    command: str


@dataclass(frozen=True)
class Gpu:
    """One GPU; on unified-memory parts (GB10) the memory figures are the system's."""

    index: int
    name: str
    uuid: str
    unified_memory: bool
    memory_total_mib: float
    memory_used_mib: float
    utilization_pct: float | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class Disk:
    """The filesystem behind one configured folder."""

    path: str
    mount: str
    fstype: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    error: str | None = None


@dataclass(frozen=True)
class Checkpoint:
    """One `checkpoint-<step>` folder of a run."""

    path: str
    step: int | None
    bytes: int


@dataclass(frozen=True)
class Run:
    """A training run folder and what its files and processes say about it."""

    host: str
    path: str
    name: str
    state: str
    pid: int | None = None
    step: int | None = None
    max_steps: int | None = None
    loss: float | None = None
    eval_loss: float | None = None
    losses: tuple[tuple[int, float], ...] = ()
    eval_losses: tuple[tuple[int, float], ...] = ()
    seconds_per_step: float | None = None
    eta_seconds: float | None = None
    adapter: str | None = None
    checkpoints: tuple[Checkpoint, ...] = ()
    reason: str | None = None
    last_update: float | None = None

    @property
    def key(self) -> str:
        """Fleet-wide id of the run: host and path."""
        return f"{self.host}:{self.path}"


@dataclass(frozen=True)
class Schedule:
    """A cron entry, systemd timer, at job or shell loop on a host."""

    id: str
    host: str
    kind: str
    user: str
    spec: str
    command: str
    source: str
    next_run: str | None = None
    pid: int | None = None
    stray: bool = False
    reasons: tuple[str, ...] = ()
    active: bool = True
    start_time: int | None = None
    #: the exact crontab / cron-file line and its 1-based number (for a checked removal)
    raw: str | None = None
    line: int | None = None
    #: systemd timer unit, and at job number
    unit: str | None = None
    job: str | None = None
    scope: str | None = None
    #: installed by the distribution (a package-owned file): never stray
    system: bool = False
    #: absolute paths the command names that do not exist on the host (why `dead-target`)
    missing_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostSnapshot:
    """One host at one poll; `reachable=False` with `error` when it could not be asked."""

    name: str
    reachable: bool
    error: str | None = None
    #: why it could not be asked, as a code: auth, key-file, timeout, unreachable, host-key-unknown...
    error_code: str | None = None
    latency_ms: float | None = None
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    load1: float | None = None
    gpus: tuple[Gpu, ...] = ()
    disks: tuple[Disk, ...] = ()
    runs: tuple[Run, ...] = ()
    schedules: tuple[Schedule, ...] = ()
    gpu_source: str | None = None
    warnings: tuple[str, ...] = ()
    time: float = 0.0
    #: CPU seconds the host's probe has spent so far (its own cost, for benchmarks)
    probe_cpu_s: float | None = None
    #: serving seats (`seats.Seat`); None when the probe did not look for them
    seats: tuple[Any, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The contract's `status --json` host object."""
        return {
            "name": self.name,
            "reachable": self.reachable,
            "error": self.error,
            "error_code": self.error_code,
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1),
            "memory": {"total_bytes": self.memory_total_bytes, "used_bytes": self.memory_used_bytes},
            "load1": self.load1,
            "gpus": [_gpu_json(g) for g in self.gpus],
            "disks": [asdict(d) for d in self.disks],
            "runs": [run_json(r) for r in self.runs],
            "schedules": [schedule_json(s) for s in self.schedules],
            "gpu_source": self.gpu_source,
            "warnings": list(self.warnings),
            "time": self.time,
            **({} if self.seats is None else {"seats": [s.to_json() for s in self.seats]}),
        }


@dataclass(frozen=True)
class FleetSnapshot:
    """Every host at one poll, in fleet-file order."""

    hosts: tuple[HostSnapshot, ...]
    time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The contract's `status --json` document."""
        return {"hosts": [h.to_json() for h in self.hosts], "time": self.time}

    @property
    def runs(self) -> list[Run]:
        """Every run on every reachable host."""
        return [r for h in self.hosts for r in h.runs]

    @property
    def schedules(self) -> list[Schedule]:
        """Every schedule on every reachable host."""
        return [s for h in self.hosts for s in h.schedules]


def _gpu_json(g: Gpu) -> dict[str, Any]:
    d = asdict(g)
    d["processes"] = [asdict(p) for p in g.processes]
    return d


def run_json(r: Run) -> dict[str, Any]:
    """The contract's `<run>` object (plus `losses`, `reason` and `last_update`)."""
    d = asdict(r)
    d["losses"] = [list(x) for x in r.losses]
    d["eval_losses"] = [list(x) for x in r.eval_losses]
    d["checkpoints"] = [asdict(c) for c in r.checkpoints]
    return d


def unreachable_json(name: str, error: str | None, error_code: str | None = None) -> dict[str, Any]:
    """One host that could not be asked, as every command's `--json` lists it (`host` is `name`
    again, for scripts written against either spelling)."""
    return {"name": name, "host": name, "error": error, "error_code": error_code}


def schedule_json(s: Schedule) -> dict[str, Any]:
    """The contract's `<schedule>` object (plus `active` and `start_time`)."""
    d = asdict(s)
    d["reasons"] = list(s.reasons)
    return d


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def run_from_json(host: str, d: dict[str, Any]) -> Run:
    """A Run from the probe's (or `runs --json`'s) dict; unknown keys are ignored."""
    return Run(
        host=host,
        path=str(d.get("path", "")),
        name=str(d.get("name", "")),
        state=d.get("state") if d.get("state") in RUN_STATES else "unknown",
        pid=_int(d.get("pid")),
        step=_int(d.get("step")),
        max_steps=_int(d.get("max_steps")),
        loss=_num(d.get("loss")),
        eval_loss=_num(d.get("eval_loss")),
        losses=tuple((int(s), float(v)) for s, v in d.get("losses") or ()),
        eval_losses=tuple((int(s), float(v)) for s, v in d.get("eval_losses") or ()),
        seconds_per_step=_num(d.get("seconds_per_step")),
        eta_seconds=_num(d.get("eta_seconds")),
        adapter=d.get("adapter"),
        checkpoints=tuple(
            Checkpoint(path=str(c.get("path")), step=_int(c.get("step")), bytes=int(c.get("bytes") or 0))
            for c in d.get("checkpoints") or ()
        ),
        reason=d.get("reason"),
        last_update=_num(d.get("last_update")),
    )


def schedule_from_json(host: str, d: dict[str, Any]) -> Schedule:
    """A Schedule from the probe's dict (stray and reasons are decided fleet-wide later)."""
    return Schedule(
        id=str(d["id"]),
        host=host,
        kind=str(d.get("kind", "")),
        user=str(d.get("user", "")),
        spec=str(d.get("spec", "")),
        command=str(d.get("command", "")),
        source=str(d.get("source", "")),
        next_run=d.get("next_run"),
        pid=_int(d.get("pid")),
        stray=bool(d.get("stray", False)),
        reasons=tuple(d.get("reasons") or ()),
        active=bool(d.get("active", True)),
        start_time=_int(d.get("start_time")),
        raw=d.get("raw"),
        line=_int(d.get("line")),
        unit=d.get("unit"),
        job=None if d.get("job") is None else str(d.get("job")),
        scope=d.get("scope"),
        system=bool(d.get("system", False)),
        missing_paths=tuple(str(p) for p in d.get("missing_paths") or ()),
    )


def host_from_probe(name: str, d: dict[str, Any], latency_ms: float | None, now: float) -> HostSnapshot:
    """A reachable HostSnapshot from one probe answer."""
    mem = d.get("memory") or {}
    gpus = tuple(
        Gpu(
            index=int(g.get("index", i)),
            name=str(g.get("name", "")),
            uuid=str(g.get("uuid", "")),
            unified_memory=bool(g.get("unified_memory", False)),
            memory_total_mib=float(g.get("memory_total_mib") or 0),
            memory_used_mib=float(g.get("memory_used_mib") or 0),
            utilization_pct=_num(g.get("utilization_pct")),
            processes=tuple(
                GpuProcess(pid=int(p.get("pid", 0)), user=str(p.get("user", "")),
                           used_mib=float(p.get("used_mib") or 0), command=str(p.get("command", "")))
                for p in g.get("processes") or ()
            ),
        )
        for i, g in enumerate(d.get("gpus") or ())
    )
    disks = tuple(
        Disk(path=str(x.get("path", "")), mount=str(x.get("mount", "")), fstype=str(x.get("fstype", "")),
             total_bytes=int(x.get("total_bytes") or 0), used_bytes=int(x.get("used_bytes") or 0),
             free_bytes=int(x.get("free_bytes") or 0), error=x.get("error"))
        for x in d.get("disks") or ()
    )
    return HostSnapshot(
        name=name,
        reachable=True,
        latency_ms=latency_ms,
        memory_total_bytes=int(mem.get("total_bytes") or 0),
        memory_used_bytes=int(mem.get("used_bytes") or 0),
        load1=_num(d.get("load1")),
        gpus=gpus,
        disks=disks,
        runs=tuple(run_from_json(name, r) for r in d.get("runs") or ()),
        schedules=tuple(schedule_from_json(name, s) for s in d.get("schedules") or ()),
        gpu_source=d.get("gpu_source"),
        warnings=tuple(d.get("warnings") or ()),
        time=now,
        probe_cpu_s=_num(d.get("probe_cpu_s")),
        seats=_seats(name, d.get("seats")),
    )


def _seats(host: str, items: Any) -> tuple[Any, ...] | None:
    if not isinstance(items, list):
        return None
    from .seats import seat_from_json  # seats.py types its hints with this module's classes

    return tuple(seat_from_json(host, s) for s in items if isinstance(s, dict))


def host_from_json(d: dict[str, Any]) -> HostSnapshot:
    """A HostSnapshot back from its `to_json()` form (recorded fleets, tests, snapshots)."""
    if not d.get("reachable"):
        return HostSnapshot(name=d["name"], reachable=False, error=d.get("error"), time=d.get("time", 0.0))
    snap = host_from_probe(d["name"], d, d.get("latency_ms"), d.get("time", 0.0))
    return snap


def fleet_from_json(d: dict[str, Any]) -> FleetSnapshot:
    """A FleetSnapshot back from `status --json` output."""
    return FleetSnapshot(hosts=tuple(host_from_json(h) for h in d.get("hosts", ())), time=d.get("time", 0.0))


__all__ = [
    "Checkpoint", "Disk", "FleetSnapshot", "Gpu", "GpuProcess", "HostSnapshot", "Run", "Schedule",
    "fleet_from_json", "host_from_json", "host_from_probe", "run_from_json", "run_json",
    "schedule_from_json", "schedule_json",
]
