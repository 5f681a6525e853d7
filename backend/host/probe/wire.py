"""What the probe answers a poll with, declared once: the answer's top level (whole, or as a
delta: `base` and `same`, probe/delta.py), and each record of its sections: a GPU with its
processes, PCIe link, ECC counts and Xid errors, a disk, a run with its checkpoints, a
schedule, a seat, a process. The probe builds them (gpu.py, gpu_health.py, nvml.py,
sampler.py, main.py); the controller holds each GPU of an answer to `GpuRecord` and
`GPU_BOUNDS`, field by field, from this declaration (`backend/fleet/validate_gpu.py`), so a
field added here is checked, escaped, kept in `status --json` and exported in `/metrics`
with nothing else to change (docs/development.md, "A new GPU figure"); the fields of the
other records that their models name are checked from it too, with `RECORD_BOUNDS` and
`RAW_TEXTS` (`backend/fleet/validate_records.py`).

Python 3.8: `typing.TypedDict`, the optional keys of a record in a `total=False` subclass of
its required ones. The probe imports this module under `TYPE_CHECKING` only: on a host
`typing` costs 8 ms a start and nothing here is needed at run time."""
# Runs on the host's Python 3.8 or newer.

from typing import Any, Dict, List, Optional, TypedDict

from fleetdeck.backend.host.probe.seat_wire import SeatRecord

# -- one GPU ---------------------------------------------------------------------------------------


class GpuProcessRecord(TypedDict):
    """A process holding memory on a card, with its SM and memory utilisation where the
    sampler had a fresh figure (None else)."""

    pid: int
    user: str
    used_mib: float
    command: str
    sm_pct: Optional[float]
    memory_util_pct: Optional[float]


class PcieRecord(TypedDict, total=False):
    """The card's PCIe link now and at best, and its throughput at `sampled_at` (a sample the
    sampler takes off the poll's path)."""

    gen: Optional[int]
    gen_max: Optional[int]
    width: Optional[int]
    width_max: Optional[int]
    tx_bytes_s: Optional[float]
    rx_bytes_s: Optional[float]
    sampled_at: Optional[float]


class EccRecord(TypedDict, total=False):
    """ECC mode and counts (volatile since the driver loaded, aggregate over the card's life),
    rows remapped, and pages or rows waiting for a reset."""

    mode: Optional[str]
    corrected: Optional[int]
    uncorrected: Optional[int]
    corrected_aggregate: Optional[int]
    uncorrected_aggregate: Optional[int]
    pending_retirement: Optional[bool]
    remapped_correctable: Optional[int]
    remapped_uncorrectable: Optional[int]
    remap_failure: Optional[bool]


class XidRecord(TypedDict):
    """One Xid error: when the probe read it (the host's clock) and its code."""

    time: float
    code: int


class GpuHealth(TypedDict, total=False):
    """A card's health figures, each None where its source does not report it (nvidia-smi
    names fewer than NVML; a key left out reads as None too). `xid` is None where no Xid
    events are watched, [] where none were read."""

    memory_util_pct: Optional[float]
    temperature_c: Optional[int]
    temperature_slowdown_c: Optional[int]
    temperature_shutdown_c: Optional[int]
    power_w: Optional[float]
    power_limit_w: Optional[float]
    sm_clock_mhz: Optional[int]
    sm_clock_max_mhz: Optional[int]
    mem_clock_mhz: Optional[int]
    mem_clock_max_mhz: Optional[int]
    throttle_reasons: Optional[List[str]]
    fan_pct: Optional[int]
    pcie: PcieRecord
    ecc: EccRecord
    persistence_mode: Optional[bool]
    compute_mode: Optional[str]
    mig_mode: Optional[bool]
    xid: Optional[List[XidRecord]]
    #: the driver's words when it lost the card (every figure is then None)
    lost: Optional[str]


class _GpuIdentity(TypedDict):
    index: int
    name: str
    uuid: str
    unified_memory: bool
    memory_total_mib: Optional[float]
    memory_used_mib: Optional[float]
    utilization_pct: Optional[float]
    processes: List[GpuProcessRecord]


class GpuRecord(_GpuIdentity, GpuHealth, total=False):
    """One card of the `gpus` section: who it is, its memory and utilisation, its processes
    and its health figures."""


#: what the controller accepts of each GPU figure beyond its declared type: a number's lowest
#: and highest (outside them it is unknown, with a warning), a text's longest (longer is cut);
#: a nested figure by its path (`pcie.gen`). A figure not named here is held to its type's
#: defaults: a whole number 0 to 10**15, a figure -1e15 to 1e15, text of 4096 characters.
#: Every text is escaped (`shown`) but a process's user and command, which actions take back
GPU_BOUNDS: Dict[str, Any] = {
    "index": (0, 1023),
    "uuid": 128,
    "memory_total_mib": (0.0, 1e15),
    "memory_used_mib": (0.0, 1e15),
    "utilization_pct": (0.0, 100.0),
    "memory_util_pct": (0.0, 100.0),
    "temperature_c": (-100, 300),
    "temperature_slowdown_c": (-100, 300),
    "temperature_shutdown_c": (-100, 300),
    "power_w": (0.0, 1e5),
    "power_limit_w": (0.0, 1e5),
    "sm_clock_mhz": (0, 10**6),
    "sm_clock_max_mhz": (0, 10**6),
    "mem_clock_mhz": (0, 10**6),
    "mem_clock_max_mhz": (0, 10**6),
    "fan_pct": (0, 1000),
    "throttle_reasons": 64,
    "pcie.gen": (0, 64),
    "pcie.gen_max": (0, 64),
    "pcie.width": (0, 1024),
    "pcie.width_max": (0, 1024),
    "pcie.tx_bytes_s": (0.0, 1e15),
    "pcie.rx_bytes_s": (0.0, 1e15),
    "pcie.sampled_at": (0.0, 1e15),
    "ecc.mode": 32,
    "compute_mode": 32,
    "xid.time": (0.0, 1e15),
    "xid.code": (0, 1_000_000),
    "lost": 200,
    "processes.pid": (0, 2**31),
    "processes.used_mib": (0.0, 1e15),
    "processes.command": 4 * 4096,
    "processes.sm_pct": (0.0, 100.0),
    "processes.memory_util_pct": (0.0, 100.0),
}

# -- the other sections ----------------------------------------------------------------------------


class DiskRecord(TypedDict):
    """The filesystem behind one configured folder (its nearest existing parent when missing,
    said in `error`)."""

    path: str
    mount: str
    fstype: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    error: Optional[str]


class _CheckpointRequired(TypedDict):
    path: str
    step: Optional[int]
    bytes: int
    problem: Optional[str]


class CheckpointRecord(_CheckpointRequired, total=False):
    """One `checkpoint-<step>` folder: complete by the layout's rule, or what it lacks."""

    complete: bool


class _RunRequired(TypedDict):
    path: str
    name: str
    state: str
    pid: Optional[int]
    step: Optional[int]
    max_steps: Optional[int]
    loss: Optional[float]
    eval_loss: Optional[float]
    losses: List[List[float]]
    eval_losses: List[List[float]]
    seconds_per_step: Optional[float]
    last_seconds_per_step: Optional[float]
    step_times: Optional[int]
    eta_seconds: Optional[float]
    adapter: Optional[str]
    checkpoints: List[CheckpointRecord]
    reason: Optional[str]
    last_update: Optional[float]


class RunRecord(_RunRequired, total=False):
    """One run folder and what its files and processes say; the series thinned to the points
    a snapshot carries (`series_thinned`: each series' whole length), the checkpoints left out
    when the section ran past its budget (`checkpoints_left_out`)."""

    series_thinned: Dict[str, int]
    checkpoints_left_out: int


class _ScheduleRequired(TypedDict):
    id: str
    kind: str
    user: str
    spec: str
    command: str
    source: str
    next_run: Optional[str]
    pid: Optional[int]
    active: bool
    start_time: Optional[int]
    reasons: List[str]
    raw: Optional[str]
    line: Optional[int]


class ScheduleRecord(_ScheduleRequired, total=False):
    """A cron line, cron file line, systemd timer, at job or shell loop (`kind`); what each
    kind has beyond the common keys, the distribution's package that installed it (`system`),
    and the paths its command names that do not exist."""

    unit: Optional[str]
    job: Optional[str]
    scope: Optional[str]
    system: bool
    package: Optional[str]
    stray: bool
    missing_paths: List[str]


class ProcessRecord(TypedDict):
    """A process that matters on the host, `why` it does (gpu, run, seat, loop, stopped, cpu,
    memory); `start` (clock ticks since boot) with `pid` is its identity."""

    pid: int
    start: Optional[int]
    ppid: Optional[int]
    user: str
    cpu_pct: Optional[float]
    rss_bytes: Optional[int]
    gpu_mib: Optional[float]
    why: List[str]
    command: str


class MemoryRecord(TypedDict):
    """System memory: total, and used as MemTotal - MemAvailable."""

    total_bytes: int
    used_bytes: int


#: what the controller accepts of the other records' fields beyond their declared types, as
#: GPU_BOUNDS does for a card's (`backend/fleet/validate_records.py`), by record: a number's
#: lowest and highest, a text's longest; a field not named here has its type's defaults
RECORD_BOUNDS: Dict[str, Dict[str, Any]] = {
    "disk": {
        "fstype": 64,
        "total_bytes": (0, 2**63 - 1),
        "used_bytes": (0, 2**63 - 1),
        "free_bytes": (0, 2**63 - 1),
    },
    "checkpoint": {"bytes": (0, 2**63 - 1), "problem": 300},
    "run": {
        "pid": (0, 2**31),
        "seconds_per_step": (0.0, 1e15),
        "last_seconds_per_step": (0.0, 1e15),
        "eta_seconds": (0.0, 1e15),
        "step_times": (0, 10**6),
    },
    "schedule": {
        "id": 128,
        "command": 4 * 4096,
        "raw": 4 * 4096,
        "pid": (0, 2**31),
        "start_time": (0, 2**63 - 1),
    },
    "seat": {
        "kind": 64,
        "model": 300,
        "port": (0, 65535),
        "listen_port": (0, 65535),
        "pid": (0, 2**31),
        "start_ticks": (0, 2**63 - 1),
        "pids": (0, 2**31),
        "command": 300,
        "restarts": (0, 2**31),
        "flags": 300,
    },
    "seat.container": {"id": 128, "name": 256, "image": 512, "status": 64, "started_at": 64},
    "seat.container.ports": {
        "container_port": (0, 65535),
        "host_port": (0, 65535),
        "host_ip": 64,
        "proto": 16,
    },
    "seat.container.mounts": {"source": 4096, "destination": 4096},
    "process": {
        "pid": (0, 2**31),
        "start": (0, 2**63 - 1),
        "ppid": (0, 2**31),
        "command": 4 * 4096,
        "cpu_pct": (0.0, 1e5),
        "rss_bytes": (0, 2**63 - 1),
        "gpu_mib": (0.0, 1e15),
    },
}

#: the texts of those records (and of a card's processes) the controller keeps as the host
#: wrote them, only cut: names, paths and commands an action takes back to the host, and the
#: texts the views escape where they show them. Any other text is escaped (`shown`) and cut.
RAW_TEXTS = frozenset(
    {
        "disk.path",
        "disk.mount",
        "disk.fstype",
        "disk.error",
        "checkpoint.path",
        "checkpoint.problem",
        "run.path",
        "run.name",
        "run.adapter",
        "run.reason",
        "schedule.id",
        "schedule.user",
        "schedule.spec",
        "schedule.command",
        "schedule.source",
        "schedule.next_run",
        "schedule.raw",
        "schedule.unit",
        "schedule.scope",
        "process.user",
        "process.command",
        "gpu.processes.user",
        "gpu.processes.command",
        "seat.kind",
        "seat.model",
        "seat.command",
        "seat.flags",
        "seat.container.id",
        "seat.container.name",
        "seat.container.image",
        "seat.container.status",
        "seat.container.started_at",
        "seat.container.restart_policy",
        "seat.container.gpus",
        "seat.container.ports.host_ip",
        "seat.container.ports.proto",
        "seat.container.mounts.source",
        "seat.container.mounts.destination",
    }
)

# -- the answer --------------------------------------------------------------------------------


class _AnswerRequired(TypedDict):
    memory: MemoryRecord
    load1: Optional[float]
    gpu_source: Optional[str]
    warnings: List[str]
    hostname: str
    pid: int
    time: float
    probe_cpu_s: float
    probe_children_cpu_s: float
    seq: int


class Answer(_AnswerRequired, total=False):
    """`snapshot`'s answer: the sections (each left out of a delta when its bytes did not
    change since answer `base`, and then named in `same`), and the fields sent every time."""

    gpus: List[GpuRecord]
    disks: List[DiskRecord]
    runs: List[RunRecord]
    schedules: List[ScheduleRecord]
    seats: Optional[List[SeatRecord]]
    processes: List[ProcessRecord]
    base: int
    same: List[str]
