"""A host's answer checked item by item into the typed snapshots of models.py: every field of
every GPU, disk, run, schedule, process and seat is bounded and typed here, and an item that
fails its check is left out with a warning naming the field, never the whole host. The check
of one field is in validate_fields.py, a GPU's in validate_gpu.py; the fields of a disk, a run,
a checkpoint, a schedule and a process are read from their declaration (validate_records.py),
their lists, enumerations and objects here."""

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
    HostSnapshot,
    Process,
    Run,
    Schedule,
)
from fleetdeck.backend.fleet.seat_model import seat_from_json
from fleetdeck.backend.fleet.validate_fields import (
    MAX_BYTES,
    MAX_ITEMS,
    MAX_TEXT,
    BadField,
    Item,
    as_count,
    as_figure,
    as_text,
    checked_series,
    described,
)
from fleetdeck.backend.fleet.validate_gpu import gpu_from_json, gpu_read_back
from fleetdeck.backend.fleet.validate_records import read
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.probe import wire


def _checkpoints(d: dict, marks: list[str]) -> tuple[Checkpoint, ...]:
    items = d.get("checkpoints")
    out = []
    for c in items[: MAX_ITEMS["checkpoints"]] if isinstance(items, list) else ():
        try:
            if not isinstance(c, dict):
                raise BadField("checkpoints", f"not an object ({described(c)})")
            mine: list[str] = []
            kw = read(c, wire.CheckpointRecord, Checkpoint, "checkpoint", mine)
            out.append(Checkpoint(**kw))
            marks.extend(f"checkpoints.{m}" for m in mine)
        except BadField as e:
            marks.append(f"checkpoints.{e}")
    return tuple(out)


def _run(host: str, d: Any, marks: list[str]) -> Run:
    if not isinstance(d, dict):
        raise BadField("run", f"not an object ({described(d)})")
    mine: list[str] = []
    kw = read(d, wire.RunRecord, Run, "run", mine)
    state = d.get("state")
    if state not in RUN_STATES:
        if state is not None:
            mine.append(f"state: unknown ({described(state)})")
        state = "unknown"
    run = Run(
        host=host,
        state=state,
        losses=checked_series(d.get("losses"), "losses", mine),
        eval_losses=checked_series(d.get("eval_losses"), "eval_losses", mine),
        checkpoints=_checkpoints(d, mine),
        **kw,
    )
    marks.extend(mine)
    return run


def run_from_json(host: str, d: dict[str, Any]) -> Run:
    """A Run from the probe's (or `runs --json`'s) dict; unknown keys are ignored. BadField
    when its path or name is not text; a bad optional figure becomes None."""
    return _run(host, d, [])


def _texts(v: Any, field: str, most: int, limit: int = MAX_TEXT) -> tuple[str, ...]:
    """A list of up to `most` raw texts (the rest left out); a text that is not one raises."""
    if not v or not isinstance(v, list):
        return ()
    return tuple(as_text(t, field, limit=limit) for t in v[:most])  # type: ignore[misc]


def _schedule(host: str, d: Any, marks: list[str]) -> Schedule:
    if not isinstance(d, dict):
        raise BadField("schedule", f"not an object ({described(d)})")
    kind = d.get("kind")
    if kind not in SCHEDULE_KINDS:
        raise BadField("kind", f"unknown ({described(kind)})")
    mine: list[str] = []
    kw = read(d, wire.ScheduleRecord, Schedule, "schedule", mine)
    job = d.get("job")
    sched = Schedule(
        host=host,
        kind=kind,
        stray=bool(d.get("stray", False)),
        reasons=_texts(d.get("reasons"), "reasons", 32, 200),
        active=d.get("active", True) is not False,
        job=None
        if job is None
        else str(as_count(job, "job"))
        if not isinstance(job, str)
        else as_text(job, "job", limit=64),
        system=d.get("system", False) is True,
        missing_paths=_texts(d.get("missing_paths"), "missing_paths", 64),
        **kw,
    )
    marks.extend(mine)
    return sched


def schedule_from_json(host: str, d: dict[str, Any]) -> Schedule:
    """A Schedule from the probe's dict (stray and reasons are decided fleet-wide later);
    BadField when a field that identifies it is bad."""
    return _schedule(host, d, [])


def _disk(d: Any, i: int, marks: list[str]) -> Disk:
    if not isinstance(d, dict):
        raise BadField("disk", f"not an object ({described(d)})")
    return Disk(**read(d, wire.DiskRecord, Disk, "disk", marks))


PROCESS_TAGS = ("gpu", "run", "seat", "loop", "stopped", "cpu", "memory")


def _process(d: Any, i: int, marks: list[str]) -> Process:
    if not isinstance(d, dict):
        raise BadField("process", f"not an object ({described(d)})")
    mine: list[str] = []
    kw = read(d, wire.ProcessRecord, Process, "process", mine)
    why = d.get("why") or []
    proc = Process(
        why=tuple(filter(PROCESS_TAGS.__contains__, why)) if isinstance(why, list) else (), **kw
    )
    if not proc.pid or proc.start is None:
        raise BadField("pid", "no pid and start time: no identity")
    marks.extend(mine)
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


#: one item of a section as checked: its value as the host sent it, the item made of it (None
#: when it was left out), what was noted of it, and its `_TEXT` once it was compared (None
#: before) (`Held` keeps them for the next answer)
Kept = tuple[Any, Any, tuple[str, ...], str | None]

#: a parsed JSON value written out, its keys in order: the same text is the same value, type
#: for type (where `==` holds 1, 1.0 and true equal, and 0.0 and -0.0); `repr` writes each kind
#: apart (a text quoted, a float with its point, True) and runs in C to the end
_TEXT = repr


def _items(
    kind: str,
    seq: Any,
    parse: Any,
    warnings: list[str],
    last: list[Kept] | None = None,
    keep: list[Kept] | None = None,
) -> tuple[Any, ...]:
    """Each item of `seq` through `parse(item, i, marks)`; a bad item is left out and named.
    `last`: the items of the last answer's same section as checked; an item sent again at its
    place as it was (the same JSON text) is taken as it was made, not checked again. `keep`
    gets each item as checked."""
    if seq is None:
        return ()
    if not isinstance(seq, list):
        warnings.append(f"{kind}: not a list ({described(seq)}); left out")
        return ()
    limit = MAX_ITEMS.get(kind, 1000)
    one = "process" if kind == "processes" else kind[:-1]
    out = []
    for i, d in enumerate(seq[:limit]):
        was = last[i] if last is not None and i < len(last) else None
        text = None
        if was is not None and was[1] is not None and was[0] == d:
            text = _TEXT(d)  # once a poll an item stays as it was; the held one's text kept
            if text != (_TEXT(was[0]) if was[3] is None else was[3]):
                text = None
        if text is not None and was is not None:
            item, marks = was[1], was[2]
            kept = was if was[3] is not None else (d, item, marks, text)
        else:
            fresh: list[str] = []
            try:
                item = parse(d, i, fresh)
            except (BadField, TypeError, ValueError, AttributeError, KeyError) as e:
                warnings.append(f"{one} {_label(d, i)} quarantined: {e}")
                if keep is not None:
                    keep.append((d, None, (), None))
                continue
            marks = tuple(fresh)
            kept = (d, item, marks, None)
        out.append(item)
        if keep is not None:
            keep.append(kept)
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


#: the sections of an answer that are validated on their own, in the order their warnings are
#: listed; each is a pure function of the section's value and the host's name, so a section whose
#: bytes did not change since the last answer is reused as validated (fleet/held.py)
SECTIONS = ("gpus", "disks", "runs", "schedules", "processes", "seats")

#: one checked section: its items (or None) and the warnings its check wrote
Section = tuple[Any, tuple[str, ...]]


def check_section(
    name: str,
    section: str,
    value: Any,
    last: list[Kept] | None = None,
    keep: list[Kept] | None = None,
) -> Section:
    """One section of host `name`'s answer checked item by item (the GPUs' Xid times still on
    the host's clock: `host_from_probe` moves them). `last` and `keep`: see `_items`."""
    warnings: list[str] = []
    if section == "gpus":
        out: Any = _items("gpus", value, gpu_from_json, warnings, last, keep)
    elif section == "disks":
        out = _items("disks", value, _disk, warnings, last, keep)
    elif section == "runs":
        out = _items("runs", value, lambda r, i, m: _run(name, r, m), warnings, last, keep)
    elif section == "schedules":
        out = _items(
            "schedules", value, lambda s, i, m: _schedule(name, s, m), warnings, last, keep
        )
    elif section == "processes":
        out = _items("processes", value, _process, warnings, last, keep)
    elif section == "seats":
        out = _seats(name, value, warnings, last, keep)
    else:
        raise KeyError(section)
    return out, tuple(warnings)


def host_from_probe(
    name: str,
    d: dict[str, Any],
    latency_ms: float | None,
    now: float,
    checked: dict[str, Section] | None = None,
) -> HostSnapshot:
    """A reachable HostSnapshot from one probe answer, each item checked on its own (see the
    boundary above): what is wrong is named in `warnings`, the rest of the host stays.
    `checked`: sections already checked (`check_section`), used instead of the answer's."""
    if not isinstance(d, dict):
        raise BadField("answer", f"not an object ({described(d)})")
    warnings: list[str] = []
    raw_warn = d.get("warnings")
    if isinstance(raw_warn, list):
        for w in raw_warn[: MAX_ITEMS["warnings"]]:
            warnings.append(w[:500] if isinstance(w, str) else described(w))
    top = Item(d, "answer")
    mem = d.get("memory") if isinstance(d.get("memory"), dict) else {}
    mi = Item(mem, "memory")
    got = dict(checked or {})
    for section in SECTIONS:
        if section not in got:
            got[section] = check_section(name, section, d.get(section))
        warnings.extend(got[section][1])
    # the answer's own figures read first, so that the snapshot is made once, its warnings in it
    total = mi.soft(as_count, "total_bytes", MAX_BYTES) or 0
    used = mi.soft(as_count, "used_bytes", MAX_BYTES) or 0
    load1 = top.soft(as_figure, "load1", 0.0, 1e6)
    gpu_source = top.soft(as_text, "gpu_source", True, 64)
    probe_cpu_s = top.soft(as_figure, "probe_cpu_s", 0.0)
    warnings.extend(f"answer: {m}" for m in top.marks)
    warnings.extend(f"memory: {m}" for m in mi.marks)
    return HostSnapshot(
        name=name,
        reachable=True,
        latency_ms=latency_ms,
        memory_total_bytes=total,
        memory_used_bytes=used,
        load1=load1,
        gpus=_on_our_clock(got["gpus"][0], d.get("time"), now),
        disks=got["disks"][0],
        runs=got["runs"][0],
        schedules=got["schedules"][0],
        gpu_source=gpu_source,
        warnings=tuple(warnings),
        time=now,
        probe_cpu_s=probe_cpu_s,
        seats=got["seats"][0],
        processes=got["processes"][0],
    )


def _seats(
    host: str,
    items: Any,
    warnings: list[str] | None = None,
    last: list[Kept] | None = None,
    keep: list[Kept] | None = None,
) -> tuple[Any, ...] | None:
    if not isinstance(items, list):
        return None
    return _items(
        "seats",
        items,
        lambda s, i, m: seat_from_json(host, s, m),
        [] if warnings is None else warnings,
        last,
        keep,
    )


def host_from_json(d: dict[str, Any]) -> HostSnapshot:
    """A HostSnapshot back from its `to_json()` form (recorded fleets, tests, snapshots)."""
    if not d.get("reachable"):
        return HostSnapshot(
            name=d["name"], reachable=False, error=d.get("error"), time=d.get("time", 0.0)
        )
    gpus = d.get("gpus")
    if isinstance(gpus, list):  # its texts were escaped once, when the probe's answer was read
        d = dict(d, gpus=[gpu_read_back(g) for g in gpus])
    return host_from_probe(d["name"], d, d.get("latency_ms"), d.get("time", 0.0))


def fleet_from_json(d: dict[str, Any]) -> FleetSnapshot:
    """A FleetSnapshot back from `status --json` output."""
    return FleetSnapshot(
        hosts=tuple(host_from_json(h) for h in d.get("hosts", ())), time=d.get("time", 0.0)
    )


__all__ = [
    "SECTIONS",
    "BadField",
    "Kept",
    "Section",
    "check_section",
    "fleet_from_json",
    "host_from_json",
    "host_from_probe",
    "run_from_json",
    "schedule_from_json",
]
