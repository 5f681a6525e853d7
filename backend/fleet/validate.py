"""A host's answer checked item by item into the typed snapshots of models.py: every field of
every GPU, disk, run, schedule, process and seat is bounded and typed here, and an item that
fails its check is left out with a warning naming the field, never the whole host."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from fleetdeck.backend.fleet.models import (
    RUN_STATES,
    SCHEDULE_KINDS,
    Checkpoint,
    Disk,
    FleetSnapshot,
    Gpu,
    GpuEcc,
    GpuPcie,
    GpuProcess,
    HostSnapshot,
    Process,
    Run,
    Schedule,
    Xid,
)
from fleetdeck.backend.fleet.seat_model import seat_from_json
from fleetdeck.backend.host.lib.text import shown

#: what one answer may hold of each kind of item (the rest is left out, with a warning)
MAX_ITEMS = {
    "gpus": 64,
    "processes": 1024,
    "disks": 256,
    "runs": 5000,
    "schedules": 5000,
    "checkpoints": 1000,
    "warnings": 200,
    "seats": 256,
    "series": 100_000,
}
#: the longest text kept from a host in one field (longer is cut, ending in "…")
MAX_TEXT = 4096
MAX_COUNT = 10**15  # steps, pids, job numbers: any real one is far below
MAX_BYTES = 2**63 - 1  # byte figures: what a signed 64-bit column holds
MAX_FIGURE = 1e15  # losses, seconds, MiB: any real one is far below


class BadField(ValueError):
    """One field of one host item failed its check."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def _desc(v: Any) -> str:
    """A bad value as a warning shows it: its type and a short, escaped form."""
    text = shown(repr(v))
    return f"{type(v).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def _text(v: Any, field: str, optional: bool = False, limit: int = MAX_TEXT) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise BadField(field, f"not text ({_desc(v)})")
    return v if len(v) <= limit else v[: limit - 1] + "…"


def _number(v: Any, field: str, lo: float, hi: float, integer: bool) -> float | int | None:
    """None for None; a bool, a non-number, a non-finite float, a float where an integer is
    meant or a value outside [lo, hi] raises BadField."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadField(field, f"not a number ({_desc(v)})")
    if isinstance(v, float):
        if not math.isfinite(v):
            raise BadField(field, f"not finite ({v})")
        if integer:
            if not v.is_integer():
                raise BadField(field, f"not a whole number ({v})")
            v = int(v)
    if not lo <= v <= hi:
        raise BadField(field, f"out of range ({_desc(v)})")
    return v if integer else float(v)


def _count(v: Any, field: str, hi: int = MAX_COUNT) -> int | None:
    return _number(v, field, 0, hi, True)  # type: ignore[return-value]


def _figure(v: Any, field: str, lo: float = -MAX_FIGURE, hi: float = MAX_FIGURE) -> float | None:
    return _number(v, field, lo, hi, False)


class _Item:
    """Reads one host item: a bad optional field becomes None and is noted (`marks`)."""

    def __init__(self, d: Any, kind: str) -> None:
        if not isinstance(d, dict):
            raise BadField(kind, f"not an object ({_desc(d)})")
        self.d = d
        self.marks: list[str] = []

    def soft(self, fn: Any, key: str, *args: Any) -> Any:
        try:
            return fn(self.d.get(key), key, *args)
        except BadField as e:
            self.marks.append(str(e))
            return None


def checked_series(v: Any, field: str, marks: list[str]) -> tuple[tuple[int, float], ...]:
    """[[step, value]...]: each bad point is dropped (counted in `marks`), the rest kept."""
    if v is None:
        return ()
    if not isinstance(v, list):
        marks.append(f"{field}: not a list ({_desc(v)})")
        return ()
    out = []
    bad = 0
    for pt in v[: MAX_ITEMS["series"]]:
        try:
            if not isinstance(pt, (list, tuple)) or len(pt) != 2:
                raise BadField(field, "not a [step, value] pair")
            step, val = _count(pt[0], field), _figure(pt[1], field)
            if step is None or val is None:
                raise BadField(field, "null")
            out.append((step, val))
        except BadField:
            bad += 1
    if bad:
        marks.append(f"{field}: {bad} bad point{'s' if bad != 1 else ''} dropped")
    if len(v) > MAX_ITEMS["series"]:
        marks.append(
            f"{field}: {len(v) - MAX_ITEMS['series']} points past {MAX_ITEMS['series']} left out"
        )
    return tuple(out)


def _run(host: str, d: Any, marks: list[str]) -> Run:
    it = _Item(d, "run")
    path = _text(d.get("path"), "path")
    name = _text(d.get("name", ""), "name")
    ckpts = []
    for c in (
        (d.get("checkpoints") or ())[: MAX_ITEMS["checkpoints"]]
        if isinstance(d.get("checkpoints"), list)
        else ()
    ):
        try:
            if not isinstance(c, dict):
                raise BadField("checkpoints", f"not an object ({_desc(c)})")
            ci = _Item(c, "checkpoint")
            ckpts.append(
                Checkpoint(
                    path=_text(c.get("path"), "checkpoints.path"),  # type: ignore[arg-type]
                    step=_count(c.get("step"), "checkpoints.step"),
                    bytes=_count(c.get("bytes") or 0, "checkpoints.bytes", MAX_BYTES) or 0,
                    complete=ci.soft(_flag, "complete"),
                    problem=ci.soft(_text, "problem", True, 300),
                )
            )
            it.marks.extend(f"checkpoints.{m}" for m in ci.marks)
        except BadField as e:
            it.marks.append(str(e))
    state = d.get("state")
    if state not in RUN_STATES:
        if state is not None:
            it.marks.append(f"state: unknown ({_desc(state)})")
        state = "unknown"
    run = Run(
        host=host,
        path=path,  # type: ignore[arg-type]
        name=name,  # type: ignore[arg-type]
        state=state,
        pid=it.soft(_count, "pid", 2**31),
        step=it.soft(_count, "step"),
        max_steps=it.soft(_count, "max_steps"),
        loss=it.soft(_figure, "loss"),
        eval_loss=it.soft(_figure, "eval_loss"),
        losses=checked_series(d.get("losses"), "losses", it.marks),
        eval_losses=checked_series(d.get("eval_losses"), "eval_losses", it.marks),
        seconds_per_step=it.soft(_figure, "seconds_per_step", 0.0),
        eta_seconds=it.soft(_figure, "eta_seconds", 0.0),
        adapter=it.soft(_text, "adapter", True),
        checkpoints=tuple(ckpts),
        reason=it.soft(_text, "reason", True),
        last_update=it.soft(_figure, "last_update"),
        last_seconds_per_step=it.soft(_figure, "last_seconds_per_step", 0.0),
        step_times=it.soft(_count, "step_times", 10**6),
    )
    marks.extend(it.marks)
    return run


def run_from_json(host: str, d: dict[str, Any]) -> Run:
    """A Run from the probe's (or `runs --json`'s) dict; unknown keys are ignored. BadField
    when its path or name is not text; a bad optional figure becomes None."""
    return _run(host, d, [])


def _schedule(host: str, d: Any, marks: list[str]) -> Schedule:
    it = _Item(d, "schedule")
    kind = d.get("kind")
    if kind not in SCHEDULE_KINDS:
        raise BadField("kind", f"unknown ({_desc(kind)})")
    reasons = d.get("reasons") or ()
    missing = d.get("missing_paths") or ()
    job = d.get("job")
    sched = Schedule(
        id=_text(d.get("id"), "id", limit=128),  # type: ignore[arg-type]
        host=host,
        kind=kind,
        user=_text(d.get("user", ""), "user"),  # type: ignore[arg-type]
        spec=_text(d.get("spec", ""), "spec"),  # type: ignore[arg-type]
        command=_text(d.get("command", ""), "command", limit=4 * MAX_TEXT),  # type: ignore[arg-type]
        source=_text(d.get("source", ""), "source"),  # type: ignore[arg-type]
        next_run=it.soft(_text, "next_run", True),
        pid=it.soft(_count, "pid", 2**31),
        stray=bool(d.get("stray", False)),
        reasons=tuple(
            _text(r, "reasons", limit=200)  # type: ignore[misc]
            for r in reasons[:32]
        )
        if isinstance(reasons, list)
        else (),
        active=d.get("active", True) is not False,
        start_time=it.soft(_count, "start_time", MAX_BYTES),
        raw=it.soft(_text, "raw", True, 4 * MAX_TEXT),
        line=it.soft(_count, "line"),
        unit=it.soft(_text, "unit", True),
        job=None
        if job is None
        else str(_count(job, "job"))
        if not isinstance(job, str)
        else _text(job, "job", limit=64),
        scope=it.soft(_text, "scope", True),
        system=d.get("system", False) is True,
        missing_paths=tuple(
            _text(p, "missing_paths")  # type: ignore[misc]
            for p in missing[:64]
        )
        if isinstance(missing, list)
        else (),
    )
    marks.extend(it.marks)
    return sched


def schedule_from_json(host: str, d: dict[str, Any]) -> Schedule:
    """A Schedule from the probe's dict (stray and reasons are decided fleet-wide later);
    BadField when a field that identifies it is bad."""
    return _schedule(host, d, [])


def _whole(v: Any, field: str, lo: int, hi: int) -> int | None:
    return _number(v, field, lo, hi, True)  # type: ignore[return-value]


def _flag(v: Any, field: str) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    raise BadField(field, f"not true, false or null ({_desc(v)})")


def _words(v: Any, field: str) -> tuple[str, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > 32:
        raise BadField(field, f"not a list of up to 32 words ({_desc(v)})")
    return tuple(_text(w, field, limit=64) for w in v)  # type: ignore[misc]


def _part(d: Any, key: str, fields: dict[str, tuple], marks: list[str]) -> dict[str, Any]:
    """The checked fields of the object at `key` (pcie, ecc); a field that fails is None."""
    sub = d.get(key)
    if sub is None:
        return {}
    if not isinstance(sub, dict):
        marks.append(f"{key}: not an object ({_desc(sub)})")
        return {}
    it = _Item(sub, key)
    out = {k: it.soft(fn, k, *args) for k, (fn, *args) in fields.items()}
    marks.extend(f"{key}.{m}" for m in it.marks)
    return out


PCIE_FIELDS = {
    "gen": (_whole, 0, 64),
    "gen_max": (_whole, 0, 64),
    "width": (_whole, 0, 1024),
    "width_max": (_whole, 0, 1024),
    "tx_bytes_s": (_figure, 0.0),
    "rx_bytes_s": (_figure, 0.0),
    "sampled_at": (_figure, 0.0),
}
ECC_FIELDS = {
    "mode": (_text, True, 32),
    "corrected": (_count,),
    "uncorrected": (_count,),
    "corrected_aggregate": (_count,),
    "uncorrected_aggregate": (_count,),
    "pending_retirement": (_flag,),
    "remapped_correctable": (_count,),
    "remapped_uncorrectable": (_count,),
    "remap_failure": (_flag,),
}


def _xids(v: Any, marks: list[str]) -> tuple[Xid, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        marks.append(f"xid: not a list ({_desc(v)})")
        return None
    out = []
    for x in v[:64]:
        try:
            if not isinstance(x, dict):
                raise BadField("xid", f"not an object ({_desc(x)})")
            t, code = (
                _figure(x.get("time"), "xid.time", 0.0),
                _count(x.get("code"), "xid.code", 1_000_000),
            )
            if t is None or code is None:
                raise BadField("xid", "no time or code")
            out.append(Xid(time=t, code=code))
        except BadField as e:
            marks.append(str(e))
    return tuple(out)


def _gpu(d: Any, i: int, marks: list[str]) -> Gpu:
    it = _Item(d, "gpu")
    procs = []
    items = d.get("processes") or ()
    for p in items[: MAX_ITEMS["processes"]] if isinstance(items, list) else ():
        try:
            pi = _Item(p, "process")
            procs.append(
                GpuProcess(
                    pid=_count(p.get("pid", 0), "processes.pid", 2**31) or 0,
                    user=_text(p.get("user", ""), "processes.user"),  # type: ignore[arg-type]
                    used_mib=pi.soft(_figure, "used_mib", 0.0) or 0.0,
                    command=_text(p.get("command", ""), "processes.command", limit=4 * MAX_TEXT),  # type: ignore[arg-type]
                    sm_pct=pi.soft(_figure, "sm_pct", 0.0, 100.0),
                    memory_util_pct=pi.soft(_figure, "memory_util_pct", 0.0, 100.0),
                )
            )
            marks.extend(f"processes.{m}" for m in pi.marks)
        except BadField as e:
            marks.append(f"a process left out: {e}")
    util = it.soft(_figure, "utilization_pct", 0.0, 100.0)
    gpu = Gpu(
        index=_count(d.get("index", i), "index", 1023),  # type: ignore[arg-type]
        name=_text(d.get("name", ""), "name"),  # type: ignore[arg-type]
        uuid=_text(d.get("uuid", ""), "uuid", limit=128),  # type: ignore[arg-type]
        unified_memory=d.get("unified_memory") is True,
        memory_total_mib=it.soft(_figure, "memory_total_mib", 0.0) or 0.0,
        memory_used_mib=it.soft(_figure, "memory_used_mib", 0.0) or 0.0,
        utilization_pct=util,
        processes=tuple(procs),
        memory_util_pct=it.soft(_figure, "memory_util_pct", 0.0, 100.0),
        temperature_c=it.soft(_whole, "temperature_c", -100, 300),
        temperature_slowdown_c=it.soft(_whole, "temperature_slowdown_c", -100, 300),
        temperature_shutdown_c=it.soft(_whole, "temperature_shutdown_c", -100, 300),
        power_w=it.soft(_figure, "power_w", 0.0, 1e5),
        power_limit_w=it.soft(_figure, "power_limit_w", 0.0, 1e5),
        sm_clock_mhz=it.soft(_whole, "sm_clock_mhz", 0, 10**6),
        sm_clock_max_mhz=it.soft(_whole, "sm_clock_max_mhz", 0, 10**6),
        mem_clock_mhz=it.soft(_whole, "mem_clock_mhz", 0, 10**6),
        mem_clock_max_mhz=it.soft(_whole, "mem_clock_max_mhz", 0, 10**6),
        throttle_reasons=it.soft(_words, "throttle_reasons"),
        fan_pct=it.soft(_whole, "fan_pct", 0, 1000),
        pcie=GpuPcie(**_part(d, "pcie", PCIE_FIELDS, it.marks)),
        ecc=GpuEcc(**_part(d, "ecc", ECC_FIELDS, it.marks)),
        persistence_mode=it.soft(_flag, "persistence_mode"),
        compute_mode=it.soft(_text, "compute_mode", True, 32),
        mig_mode=it.soft(_flag, "mig_mode"),
        xid=_xids(d.get("xid"), it.marks),
        lost=it.soft(_text, "lost", True, 200),
    )
    marks.extend(it.marks)
    return gpu


def _disk(d: Any, i: int, marks: list[str]) -> Disk:
    it = _Item(d, "disk")
    disk = Disk(
        path=_text(d.get("path", ""), "path"),  # type: ignore[arg-type]
        mount=_text(d.get("mount", ""), "mount"),  # type: ignore[arg-type]
        fstype=_text(d.get("fstype", ""), "fstype", limit=64),  # type: ignore[arg-type]
        total_bytes=it.soft(_count, "total_bytes", MAX_BYTES) or 0,
        used_bytes=it.soft(_count, "used_bytes", MAX_BYTES) or 0,
        free_bytes=it.soft(_count, "free_bytes", MAX_BYTES) or 0,
        error=it.soft(_text, "error", True),
    )
    marks.extend(it.marks)
    return disk


PROCESS_TAGS = ("gpu", "run", "seat", "loop", "stopped", "cpu", "memory")


def _process(d: Any, i: int, marks: list[str]) -> Process:
    it = _Item(d, "process")
    why = d.get("why") or []
    proc = Process(
        pid=_count(d.get("pid"), "pid", 2**31) or 0,
        start=_count(d.get("start"), "start", MAX_BYTES),  # type: ignore[arg-type]
        user=_text(d.get("user", ""), "user"),  # type: ignore[arg-type]
        command=_text(d.get("command", ""), "command", limit=4 * MAX_TEXT),  # type: ignore[arg-type]
        cpu_pct=it.soft(_figure, "cpu_pct", 0.0, 1e5),
        rss_bytes=it.soft(_count, "rss_bytes", MAX_BYTES),
        gpu_mib=it.soft(_figure, "gpu_mib", 0.0),
        why=tuple(t for t in why if t in PROCESS_TAGS) if isinstance(why, list) else (),
        ppid=it.soft(_count, "ppid", 2**31),
    )
    if not proc.pid or proc.start is None:
        raise BadField("pid", "no pid and start time: no identity")
    marks.extend(it.marks)
    return proc


def _label(d: Any, i: int) -> str:
    """How a warning names one item: its name or path where it has a readable one."""
    if isinstance(d, dict):
        for k in ("name", "path", "id", "index", "uuid"):
            v = d.get(k)
            if isinstance(v, str | int) and not isinstance(v, bool):
                text = shown(str(v))
                return f"#{i} {text[:60]}{'…' if len(text) > 60 else ''}"
    return f"#{i}"


def _items(kind: str, seq: Any, parse: Any, warnings: list[str]) -> tuple[Any, ...]:
    """Each item of `seq` through `parse(item, i, marks)`; a bad item is left out and named."""
    if seq is None:
        return ()
    if not isinstance(seq, list):
        warnings.append(f"{kind}: not a list ({_desc(seq)}); left out")
        return ()
    limit = MAX_ITEMS.get(kind, 1000)
    one = "process" if kind == "processes" else kind[:-1]
    out = []
    for i, d in enumerate(seq[:limit]):
        marks: list[str] = []
        try:
            out.append(parse(d, i, marks))
        except (BadField, TypeError, ValueError, AttributeError, KeyError) as e:
            warnings.append(f"{one} {_label(d, i)} quarantined: {e}")
            continue
        for m in marks[:8]:
            warnings.append(f"{one} {_label(d, i)}: {m}")
    if len(seq) > limit:
        warnings.append(f"{kind}: {len(seq) - limit} past {limit} left out")
    return tuple(out)


def _on_our_clock(gpus: tuple[Gpu, ...], host_time: Any, now: float) -> tuple[Gpu, ...]:
    """The GPUs with their Xid times moved from the host's clock to ours (the answer's `time`
    is the host's clock at the poll, `now` ours), so a rule compares them with the poll's time."""
    if (
        not now
        or isinstance(host_time, bool)
        or not isinstance(host_time, (int, float))
        or not math.isfinite(host_time)
        or not any(g.xid for g in gpus)
    ):
        return gpus
    shift = now - host_time
    return tuple(
        replace(g, xid=tuple(replace(x, time=x.time + shift) for x in g.xid)) if g.xid else g
        for g in gpus
    )


def host_from_probe(
    name: str, d: dict[str, Any], latency_ms: float | None, now: float
) -> HostSnapshot:
    """A reachable HostSnapshot from one probe answer, each item checked on its own (see the
    boundary above): what is wrong is named in `warnings`, the rest of the host stays."""
    if not isinstance(d, dict):
        raise BadField("answer", f"not an object ({_desc(d)})")
    warnings: list[str] = []
    raw_warn = d.get("warnings")
    if isinstance(raw_warn, list):
        for w in raw_warn[: MAX_ITEMS["warnings"]]:
            warnings.append(w[:500] if isinstance(w, str) else _desc(w))
    top = _Item(d, "answer")
    mem = d.get("memory") if isinstance(d.get("memory"), dict) else {}
    mi = _Item(mem, "memory")
    gpus = _on_our_clock(_items("gpus", d.get("gpus"), _gpu, warnings), d.get("time"), now)
    disks = _items("disks", d.get("disks"), _disk, warnings)
    runs = _items("runs", d.get("runs"), lambda r, i, m: _run(name, r, m), warnings)
    schedules = _items(
        "schedules", d.get("schedules"), lambda s, i, m: _schedule(name, s, m), warnings
    )
    processes = _items("processes", d.get("processes"), _process, warnings)
    snap = HostSnapshot(
        name=name,
        reachable=True,
        latency_ms=latency_ms,
        memory_total_bytes=mi.soft(_count, "total_bytes", MAX_BYTES) or 0,
        memory_used_bytes=mi.soft(_count, "used_bytes", MAX_BYTES) or 0,
        load1=top.soft(_figure, "load1", 0.0, 1e6),
        gpus=gpus,
        disks=disks,
        runs=runs,
        schedules=schedules,
        gpu_source=top.soft(_text, "gpu_source", True, 64),
        warnings=(),
        time=now,
        probe_cpu_s=top.soft(_figure, "probe_cpu_s", 0.0),
        seats=_seats(name, d.get("seats"), warnings),
        processes=processes,
    )
    warnings.extend(f"answer: {m}" for m in top.marks)
    warnings.extend(f"memory: {m}" for m in mi.marks)
    return replace(snap, warnings=tuple(warnings))


def _seats(host: str, items: Any, warnings: list[str] | None = None) -> tuple[Any, ...] | None:
    if not isinstance(items, list):
        return None
    return _items(
        "seats",
        items,
        lambda s, i, m: seat_from_json(host, s),
        [] if warnings is None else warnings,
    )


def host_from_json(d: dict[str, Any]) -> HostSnapshot:
    """A HostSnapshot back from its `to_json()` form (recorded fleets, tests, snapshots)."""
    if not d.get("reachable"):
        return HostSnapshot(
            name=d["name"], reachable=False, error=d.get("error"), time=d.get("time", 0.0)
        )
    snap = host_from_probe(d["name"], d, d.get("latency_ms"), d.get("time", 0.0))
    return snap


def fleet_from_json(d: dict[str, Any]) -> FleetSnapshot:
    """A FleetSnapshot back from `status --json` output."""
    return FleetSnapshot(
        hosts=tuple(host_from_json(h) for h in d.get("hosts", ())), time=d.get("time", 0.0)
    )


__all__ = [
    "MAX_ITEMS",
    "BadField",
    "checked_series",
    "fleet_from_json",
    "host_from_json",
    "host_from_probe",
    "run_from_json",
    "schedule_from_json",
]
