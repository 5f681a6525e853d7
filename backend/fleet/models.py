"""Frozen snapshots of the fleet: what the probe saw, shaped as the contract's JSON (the checks
that build them from a host's answer, item by item, are in validate.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

RUN_STATES = ("running", "finished", "failed", "stalled", "queued", "cancelled", "unknown")
SCHEDULE_KINDS = ("crontab", "cron-file", "systemd-timer", "at", "loop")


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU; its SM and memory utilisation where NVML sampled them."""

    pid: int
    user: str
    used_mib: float
    command: str
    sm_pct: float | None = None
    memory_util_pct: float | None = None


@dataclass(frozen=True)
class GpuPcie:
    """A GPU's PCIe link now and at best, and its throughput at `sampled_at` (a rare sample)."""

    gen: int | None = None
    gen_max: int | None = None
    width: int | None = None
    width_max: int | None = None
    tx_bytes_s: float | None = None
    rx_bytes_s: float | None = None
    sampled_at: float | None = None


@dataclass(frozen=True)
class GpuEcc:
    """ECC mode and error counts (volatile: since the driver loaded; aggregate: the card's
    life), and rows waiting to be remapped or pages to be retired at the next reset."""

    mode: str | None = None
    corrected: int | None = None
    uncorrected: int | None = None
    corrected_aggregate: int | None = None
    uncorrected_aggregate: int | None = None
    pending_retirement: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_failure: bool | None = None


@dataclass(frozen=True)
class Xid:
    """One Xid error: when the probe read it (host clock) and its code."""

    time: float
    code: int


@dataclass(frozen=True)
class Gpu:
    """One GPU; on unified-memory parts (GB10) the memory figures are the system's. Every
    health figure is None where the driver does not report it (docs/probe.md, "GPU health");
    `xid` is None where no Xid events are watched, () where none were seen."""

    index: int
    name: str
    uuid: str
    unified_memory: bool
    #: None where the host did not report it: unknown, never drawn or exported as 0
    memory_total_mib: float | None
    memory_used_mib: float | None
    utilization_pct: float | None
    processes: tuple[GpuProcess, ...] = ()
    memory_util_pct: float | None = None
    temperature_c: int | None = None
    temperature_slowdown_c: int | None = None
    temperature_shutdown_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    fan_pct: int | None = None
    pcie: GpuPcie = GpuPcie()
    ecc: GpuEcc = GpuEcc()
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    mig_mode: bool | None = None
    xid: tuple[Xid, ...] | None = None
    #: the driver's words when it lost the card (NVML "GPU is lost", as after an Xid 79):
    #: every figure above is then unknown, not zero
    lost: str | None = None
    #: the figures the probe declares (backend/host/probe/wire.py) that this model does not
    #: name as attributes, checked as declared: (path, value), `pcie.gen` for a nested one
    extra: tuple[tuple[str, Any], ...] = ()

    def figure(self, path: str) -> Any:
        """A declared figure by its path in the probe's record (`temperature_c`, `pcie.gen`):
        the attribute where this model names it, else from `extra`; None where it is unknown."""
        part, _, field = path.partition(".")
        if part in self.__dataclass_fields__ and part != "extra":
            v = getattr(self, part)
            if not field:
                return v
            if hasattr(v, field):
                return getattr(v, field)
        return next((v for k, v in self.extra if k == path), None)


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
    #: complete by the layout's one rule (weights and config); None when the host did not say
    complete: bool | None = None
    #: what an incomplete one lacks (a save killed half-way), as the host's rule words it
    problem: str | None = None


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
    #: the median of the last `step_times` step times (the ETA and the stall limit use it)
    seconds_per_step: float | None = None
    eta_seconds: float | None = None
    adapter: str | None = None
    checkpoints: tuple[Checkpoint, ...] = ()
    reason: str | None = None
    last_update: float | None = None
    #: the newest step's own time, and how many step times the median is of
    last_seconds_per_step: float | None = None
    step_times: int | None = None

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
class Process:
    """A process that matters to the operator (GPU holder, trainer, seat, loop, top CPU or
    memory user); `start` (clock ticks since boot) with `pid` is its identity."""

    pid: int
    start: int
    user: str
    command: str
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    gpu_mib: float | None = None
    why: tuple[str, ...] = ()
    #: the parent's pid as the probe read it (the Host view's tree); None when not sent
    ppid: int | None = None


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
    #: the processes that matter on the host (probe_procs)
    processes: tuple[Process, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The contract's `status --json` host object."""
        return {
            "name": self.name,
            "reachable": self.reachable,
            "error": self.error,
            "error_code": self.error_code,
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1),
            "memory": {
                "total_bytes": self.memory_total_bytes,
                "used_bytes": self.memory_used_bytes,
            },
            "load1": self.load1,
            "gpus": [_gpu_json(g) for g in self.gpus],
            "disks": [asdict(d) for d in self.disks],
            "runs": [run_json(r) for r in self.runs],
            "schedules": [schedule_json(s) for s in self.schedules],
            "gpu_source": self.gpu_source,
            "warnings": list(self.warnings),
            "time": self.time,
            **({} if self.seats is None else {"seats": [s.to_json() for s in self.seats]}),
            "processes": [dict(asdict(p), why=list(p.why)) for p in self.processes],
        }


def judged_host(h: HostSnapshot, schedules: tuple[Schedule, ...]) -> HostSnapshot:
    """`h` with `schedules` (the stray verdict's), as `dataclasses.replace` makes it, without
    going through every field of its `__init__` again: the fields copied, one changed. The
    verdict makes one a host-poll."""
    new = object.__new__(HostSnapshot)
    new.__dict__.update(h.__dict__)
    new.__dict__["schedules"] = schedules
    return new


def judged_schedule(s: Schedule, reasons: tuple[str, ...], stray: bool) -> Schedule:
    """`s` with the stray verdict's `reasons` and `stray`, made as `judged_host` is (the
    verdict makes one a schedule of every host it judges again)."""
    new = object.__new__(Schedule)
    new.__dict__.update(s.__dict__)
    new.__dict__["reasons"] = reasons
    new.__dict__["stray"] = stray
    return new


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
    """A card as the probe declared it: the model's attributes and, where they were, the
    figures kept in `extra` (a nested one in its object: `pcie.gen` under `pcie`)."""
    d = asdict(g)
    d["processes"] = [asdict(p) for p in g.processes]
    d["throttle_reasons"] = None if g.throttle_reasons is None else list(g.throttle_reasons)
    d["xid"] = None if g.xid is None else [asdict(x) for x in g.xid]
    del d["extra"]
    for path, v in g.extra:
        part, _, field = path.partition(".")
        v = list(v) if isinstance(v, tuple) else v
        if field:
            d.setdefault(part, {})[field] = v
        else:
            d[part] = v
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


# -- the boundary: host JSON into these types, one item at a time ---------------------------------
# Every field is checked for its type, its range and (numbers) finiteness. A run, schedule, GPU,
# GPU process or disk whose identifying fields are bad is quarantined: left out, with a warning
# naming the host, the item and the field. An optional figure that is bad (a NaN loss, an ETA
# past any horizon) becomes unknown (None), with a warning too. No value can fail the answer.


__all__ = [
    "judged_host",
    "judged_schedule",
    "Checkpoint",
    "Disk",
    "FleetSnapshot",
    "Gpu",
    "GpuEcc",
    "GpuPcie",
    "GpuProcess",
    "HostSnapshot",
    "Process",
    "Run",
    "Schedule",
    "Xid",
    "run_json",
    "schedule_json",
    "unreachable_json",
]
