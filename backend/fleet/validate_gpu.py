"""One GPU of a host's answer checked into a `Gpu`, field by field from the probe's own
declaration (`backend/host/probe/wire.py`: `GpuRecord`, its nested `PcieRecord` and
`EccRecord`, and `GPU_BOUNDS`): each declared figure is held to its declared type and bounds,
a text is escaped (`as_label`), a bool is true, false or null, so a figure the driver got wrong
is None with a warning and the card stays. The plan of checks is read from the declaration
once per record; a figure the declaration gains is checked from then on, and one the `Gpu`
model does not name yet is kept in `Gpu.extra` (in `status --json` and `/metrics` too).

A bad index, name or uuid (`IDENTITY`) leaves the card out; processes and Xid errors are
lists of records, each item checked from its own declaration (`GpuProcessRecord`, `XidRecord`:
validate_records.py)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

from fleetdeck.backend.fleet.models import Gpu, GpuEcc, GpuPcie, GpuProcess, Xid
from fleetdeck.backend.fleet.validate_fields import (
    MAX_COUNT,
    MAX_FIGURE,
    MAX_ITEMS,
    MAX_TEXT,
    BadField,
    as_count,
    as_figure,
    as_flag,
    as_label,
    as_whole,
    as_words,
    described,
    unshown,
)
from fleetdeck.backend.fleet.validate_records import read, unwrapped
from fleetdeck.backend.host.probe import wire as probe_wire

#: the figures whose bad value leaves the card out (a card is known by them), not unknown
IDENTITY = ("index", "name", "uuid")
#: the fields of the record that are lists of records, each item checked on its own
LISTS = ("processes", "xid")
#: the models of the nested records, by the key that holds one
NESTED: dict[str, type] = {"pcie": GpuPcie, "ecc": GpuEcc}

#: one planned check: the key in the record, its path (`pcie.gen`, for its bounds and its
#: warning), the check and its arguments after (value, path), and for a nested record its plan
Step = tuple[str, str, Callable[..., Any], tuple[Any, ...], "Plan | None"]


@dataclasses.dataclass(frozen=True, eq=False)  # one per record (plan_of): known by identity
class Plan:
    """A record's checks in its declared order, and the keys its model names (the rest go to
    `Gpu.extra`, by path)."""

    steps: tuple[Step, ...]
    named: frozenset[str]


def _check(path: str, hint: Any, bounds: dict[str, Any]) -> tuple[Callable[..., Any], tuple]:
    """The check of one scalar figure from its declared type and its entry in `bounds`."""
    base, bound = unwrapped(hint), bounds.get(path)
    if base is bool:
        return as_flag, ()
    if base is int:
        return as_whole, tuple(bound or (0, MAX_COUNT))
    if base is float:
        return as_figure, tuple(bound or (-MAX_FIGURE, MAX_FIGURE))
    if base is str:
        return as_label, (True, bound or MAX_TEXT)
    if get_origin(base) is list and get_args(base) == (str,):
        return as_words, (bound or 64,)
    raise TypeError(f"no check for the GPU figure {path} declared as {hint!r}: add one here")


@functools.cache
def plan_of(record: type, model: type, prefix: str = "") -> Plan:
    """The checks of a declared GPU record (`GpuRecord`, or a nested one under `prefix`) with
    the bounds its wire module declares, made once per record."""
    steps: list[Step] = []
    for key, hint in get_type_hints(record).items():
        path = prefix + key
        if not prefix and (key in LISTS or key in IDENTITY):
            continue
        if is_typeddict(hint):
            sub = plan_of(hint, NESTED.get(key, dict), path + ".")
            steps.append((key, path, _nested, (), sub))
            continue
        fn, args = _check(path, hint, probe_wire.GPU_BOUNDS)
        steps.append((key, path, fn, args, None))
    named = (
        frozenset(f.name for f in dataclasses.fields(model)) if model is not dict else frozenset()
    )
    return Plan(tuple(steps), named)


def declared_figures() -> tuple[tuple[str, Callable[..., Any]], ...]:
    """Every scalar figure the probe declares for a card (`pcie.gen` for a nested one), named
    by the `Gpu` model or kept in `Gpu.extra`, each with its check (`as_whole`, `as_figure`,
    `as_flag`, `as_label`, `as_words`), in declared order: what `/metrics` exports from."""
    return _scalars(plan_of(probe_wire.GpuRecord, Gpu))


@functools.cache
def _scalars(plan: Plan) -> tuple[tuple[str, Callable[..., Any]], ...]:
    out: list[tuple[str, Callable[..., Any]]] = []
    for _key, path, fn, _args, sub in plan.steps:
        out.extend(_scalars(sub) if sub is not None else [(path, fn)])
    return tuple(out)


def _nested(*_: Any) -> None:  # the marker of a nested record's step; never called
    raise AssertionError


def _read(d: dict, plan: Plan, marks: list[str], extra: list[tuple[str, Any]]) -> dict[str, Any]:
    """The model's keyword arguments from record `d` by `plan`: a bad figure is None, noted in
    `marks`; a figure the model does not name goes to `extra` by its path."""
    out: dict[str, Any] = {}
    for key, path, fn, args, sub in plan.steps:
        v = d.get(key)
        if sub is not None:
            got: Any = None
            if isinstance(v, dict):
                got = _read(v, sub, marks, extra)
            elif v is not None:
                marks.append(f"{path}: not an object ({described(v)})")
            if key in plan.named:
                out[key] = NESTED[key](**(got or {}))
            continue
        if v is not None:
            try:
                v = fn(v, path, *args)
            except BadField as e:
                marks.append(str(e))
                v = None
        if key in plan.named:
            out[key] = v
        else:  # unknown stays in, as null, as a named figure's does
            extra.append((path, v))
    return out


def _xids(v: Any, marks: list[str]) -> tuple[Xid, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        marks.append(f"xid: not a list ({described(v)})")
        return None
    out = []
    for x in v[:64]:
        try:
            if not isinstance(x, dict):
                raise BadField("xid", f"not an object ({described(x)})")
            kw = read(x, probe_wire.XidRecord, Xid, "gpu.xid", marks)
            if kw["time"] is None or kw["code"] is None:
                raise BadField("xid", "no time or code")
            out.append(Xid(**kw))
        except BadField as e:
            marks.append(str(e))
    return tuple(out)


def _processes(d: dict, marks: list[str]) -> tuple[GpuProcess, ...]:
    procs = []
    items = d.get("processes") or ()
    for p in items[: MAX_ITEMS["processes"]] if isinstance(items, list) else ():
        try:
            if not isinstance(p, dict):
                raise BadField("process", f"not an object ({described(p)})")
            mine: list[str] = []
            kw = read(p, probe_wire.GpuProcessRecord, GpuProcess, "gpu.processes", mine)
            procs.append(GpuProcess(**dict(kw, pid=kw["pid"] or 0)))
            marks.extend(mine)
        except BadField as e:
            marks.append(f"a process left out: {e}")
    return tuple(procs)


def _unshown_labels(d: dict, plan: Plan) -> dict:
    out = dict(d)
    for key, _path, fn, _args, sub in plan.steps:
        v = out.get(key)
        if sub is not None and isinstance(v, dict):
            out[key] = _unshown_labels(v, sub)
        elif fn is as_label and isinstance(v, str):
            out[key] = unshown(v)
        elif fn is as_words and isinstance(v, list):
            out[key] = [unshown(w) if isinstance(w, str) else w for w in v]
    return out


def gpu_read_back(d: Any) -> Any:
    """A card of `status --json` as the probe gave it, for `gpu_from_json` to check again: its
    texts (`as_label`, `as_words`; the name and uuid) were escaped when it was first checked,
    so they are taken back to what was escaped (`unshown`) and come out of the check as they
    were printed, not escaped twice."""
    if not isinstance(d, dict):
        return d
    out = _unshown_labels(d, plan_of(probe_wire.GpuRecord, Gpu))
    for key in ("name", "uuid"):
        if isinstance(out.get(key), str):
            out[key] = unshown(out[key])
    return out


def gpu_from_json(d: Any, i: int, marks: list[str]) -> Gpu:
    """GPU number `i` of an answer, checked by the probe's declaration of it (`GpuRecord`);
    what is wrong with a figure goes to `marks`, a bad identity raises BadField."""
    if not isinstance(d, dict):
        raise BadField("gpu", f"not an object ({described(d)})")
    b = probe_wire.GPU_BOUNDS
    mine: list[str] = []
    extra: list[tuple[str, Any]] = []
    kw = _read(d, plan_of(probe_wire.GpuRecord, Gpu), mine, extra)
    kw["unified_memory"] = kw.get("unified_memory") is True
    gpu = Gpu(
        **kw,
        index=as_count(d.get("index", i), "index", b["index"][1]),  # type: ignore[arg-type]
        name=as_label(d.get("name", ""), "name"),  # type: ignore[arg-type]
        uuid=as_label(d.get("uuid", ""), "uuid", limit=b["uuid"]),  # type: ignore[arg-type]
        processes=_processes(d, mine),
        xid=_xids(d.get("xid"), mine),
        extra=tuple(extra),
    )
    marks.extend(mine)
    return gpu


__all__ = [
    "IDENTITY",
    "Plan",
    "declared_figures",
    "gpu_from_json",
    "gpu_read_back",
    "plan_of",
]
