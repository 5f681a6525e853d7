"""The probe's records other than a card's figures (a disk, a run, a checkpoint, a schedule, a
process, and a card's processes and Xid errors) read field by field from their declaration in
`backend/host/probe/wire.py` (`DiskRecord`... and `RECORD_BOUNDS`; `GPU_BOUNDS` for a card's
lists): each field the model names is held to its declared type and bounds, so a field added
to a record and to its model is checked with nothing else to change.

What a field's declaration says of it:

- a figure, a flag or an `Optional` text: a bad value is None (or the model's default, or 0
  where the model has none and the field is not `Optional`) with a warning; the item stays;
- a text that is not `Optional`, and the fields of `IDENTITY`: a bad value leaves the item out;
- a text is cut to its bound (4096 by default) and escaped (`as_label`), but those in
  `wire.RAW_TEXTS`, which stay as the host wrote them (an action takes them back to it).

A field of another shape (a list, an enumeration, an object) is read by hand by the caller
(`BY_HAND`), and a declared field the model does not name is not read. A record with no model
of its own (a seat's container, its ports and mounts) is read whole from its declaration by
`read_object`: its texts, figures, lists of either and lists of records."""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from fleetdeck.backend.fleet.validate_fields import (
    MAX_COUNT,
    MAX_FIGURE,
    MAX_TEXT,
    BadField,
    as_figure,
    as_flag,
    as_label,
    as_text,
    as_whole,
    described,
)
from fleetdeck.backend.host.probe import wire as probe_wire

#: the fields, by record, whose bad value leaves the item out: what it is known by
IDENTITY = {
    "run": ("path",),
    "checkpoint": ("path",),
    "schedule": ("id",),
    "process": ("pid", "start"),
    "gpu.processes": ("pid",),
    "gpu.xid": ("time", "code"),
    "seat": ("kind",),
}
#: the fields, by record, that are read by hand (lists, enumerations, objects, a flag whose
#: absence means something): the plan leaves them to the caller
BY_HAND = {
    "run": ("state", "losses", "eval_losses", "checkpoints"),
    "schedule": ("kind", "reasons", "missing_paths", "job", "stray", "active", "system"),
    "process": ("why",),
    "seat": ("pids", "flags", "container"),
}

#: one field's check: its key, its name in a warning (`processes.pid`), the check and its
#: arguments after (value, name), whether a bad value leaves the item out, what a key left out
#: reads as, what stands in for None (None where None is a value), and the type and bounds a
#: value is taken as it is by (`_fast`: no call for a good one)
Step = tuple[str, str, Callable[..., Any], tuple[Any, ...], bool, Any, Any, Any, Any, Any]

_ZERO = {int: 0, float: 0.0, bool: False, str: ""}


def unwrapped(hint: Any) -> Any:
    """The declared type without its `Optional`."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _bounds(name: str) -> tuple[dict[str, Any], str]:
    """The bounds of record `name` and the prefix its fields are named by in them."""
    if name.startswith("gpu."):
        prefix = name[4:] + "."
        return probe_wire.GPU_BOUNDS, prefix
    return probe_wire.RECORD_BOUNDS.get(name, {}), ""


def _check(name: str, key: str, base: Any, bound: Any) -> tuple[Callable[..., Any], tuple]:
    if base is bool:
        return as_flag, ()
    if base is int:
        return as_whole, tuple(bound or (0, MAX_COUNT))
    if base is float:
        return as_figure, tuple(bound or (-MAX_FIGURE, MAX_FIGURE))
    if base is str:
        raw = f"{name}.{key}" in probe_wire.RAW_TEXTS
        return (
            (as_text, (False, bound or MAX_TEXT)) if raw else (as_label, (False, bound or MAX_TEXT))
        )
    raise TypeError(f"no check for {name}.{key} declared as {base!r}: read it by hand (BY_HAND)")


def _fast(fn: Callable[..., Any], base: Any, args: tuple) -> tuple[Any, Any, Any]:
    """The type and bounds a good value has as it is (its check would give it back unchanged):
    a whole number or a float within the bounds, a raw text within its length. Another check
    (`as_label`, `as_flag`) has none: no value is a `_Never`."""
    if fn is as_whole:
        return int, args[0], args[1]
    if fn is as_figure:
        return float, args[0], args[1]
    if fn is as_text:
        return str, 0, args[1]
    return _Never, 0, 0


class _Never:
    """The type no value of an answer has."""


@functools.cache
def plan(record: type, model: type, name: str) -> tuple[Step, ...]:
    """The checks of the fields of `record` that `model` names, in declared order."""
    bounds, prefix = _bounds(name)
    fields = {f.name: f for f in dataclasses.fields(model)}
    hard = IDENTITY.get(name, ())
    steps: list[Step] = []
    for key, hint in get_type_hints(record).items():
        if key not in fields or key in BY_HAND.get(name, ()):
            continue
        base = unwrapped(hint)
        optional = base is not hint
        fn, args = _check(name, key, base, bounds.get(prefix + key))
        f = fields[key]
        stand = f.default if f.default is not dataclasses.MISSING else _ZERO.get(base)
        if key in hard or optional:
            stand = None  # None is a value; an identity left out stays None: its caller decides
        text = base is str and not optional
        missing = "" if text and key not in hard else None
        steps.append(
            (
                key,
                prefix + key,
                fn,
                args,
                key in hard or text,
                missing,
                stand,
                *_fast(fn, base, args),
            )
        )
    return tuple(steps)


def read(d: dict, record: type, model: type, name: str, marks: list[str]) -> dict[str, Any]:
    """The model's keyword arguments from item `d` by the declaration of `record`: a bad field
    is None (or its stand-in), noted in `marks`, or raises BadField where it leaves the item
    out."""
    out: dict[str, Any] = {}
    for key, path, fn, args, hard, missing, stand, kind, lo, hi in plan(record, model, name):
        v: Any = d.get(key, missing)
        if type(v) is kind and lo <= (len(v) if kind is str else v) <= hi:
            out[key] = v  # what the check would give back: the common case, with no call
            continue
        if v is None and not hard:
            out[key] = stand
            continue
        if hard:
            v = fn(v, path, *args)
        else:
            try:
                v = fn(v, path, *args)
            except BadField as e:
                marks.append(str(e))
                v = None
        out[key] = stand if v is None else v
    return out


#: the most items a list in a record read by `read_object` keeps (the rest left out, noted)
MAX_LIST = 64


def read_object(d: Any, record: type, name: str, marks: list[str]) -> dict[str, Any]:
    """Object `d` as record `name` declares it (`record`, a TypedDict with no model of its
    own), each declared field checked as `read` checks a model's: a bad optional field is None,
    noted; a bad other field raises BadField (the caller leaves the object out). A list keeps
    its first `MAX_LIST` good items (a bad one is left out, noted; what is not a list is empty,
    noted); a key not declared is dropped."""
    if not isinstance(d, dict):
        raise BadField(name, f"not an object ({described(d)})")
    bounds, prefix = _bounds(name)
    out: dict[str, Any] = {}
    for key, hint in get_type_hints(record).items():
        base = unwrapped(hint)
        path = f"{name}.{key}"
        v = d.get(key)
        if v is None and base is not hint:
            out[key] = None
            continue
        try:
            out[key] = _value(v, base, name, key, bounds.get(prefix + key), marks)
        except BadField as e:
            if base is hint and get_origin(base) is not list:
                raise
            marks.append(str(e))
            out[key] = [] if get_origin(base) is list else None
        if get_origin(base) is list and isinstance(v, list) and len(v) > MAX_LIST:
            marks.append(f"{path}: {len(v) - MAX_LIST} past {MAX_LIST} left out")
    return out


def _value(v: Any, base: Any, name: str, key: str, bound: Any, marks: list[str]) -> Any:
    """One declared field's value: a record, a list of its item's kind, or a scalar."""
    path = f"{name}.{key}"
    if is_typeddict(base):
        return read_object(v, base, path, marks)
    if get_origin(base) is list:
        if not isinstance(v, list):
            raise BadField(path, f"not a list ({described(v)})")
        (item,) = get_args(base)
        out = []
        for x in v[:MAX_LIST]:
            try:
                out.append(_value(x, item, name, key, bound, marks))
            except BadField as e:
                marks.append(f"{e} (left out)")
        return out
    fn, args = _check(name, key, base, bound)
    got = fn(v, path, *args)
    if got is None:
        raise BadField(path, f"missing ({described(v)})")
    return got


__all__ = ["BY_HAND", "IDENTITY", "MAX_LIST", "plan", "read", "read_object", "unwrapped"]
