"""A helper's answer held to the record its wire module declares (`backend/host/*/wire.py`),
field by field, before the controller reads it: a type proves nothing about a host's bytes.

The keys and the types checked are read from the declaration itself (`__required_keys__` and
`typing.get_type_hints`), so a field added to a record is checked from then on, with nothing
else to keep in step. A required key missing, or any declared key holding another type, is one
`HostError` (code `bad-answer`) naming the helper, the field (`paths[2].pins`) and what it
held; keys a record does not declare pass untouched (an older controller reads a newer host)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import (
    Any,
    Literal,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from fleetdeck.backend.fleet.errors import HostError

R = TypeVar("R")

_SCALARS: dict[Any, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
    list: "a list",
    dict: "an object",
}


def kind_of(value: object) -> str:
    """What a JSON value is, in words ("a string", "null", "an object")."""
    if isinstance(value, bool):
        return "true or false"
    for t, words in _SCALARS.items():
        if t is not bool and isinstance(value, t):
            return words
    return f"a {type(value).__name__}"


def _wanted(hint: Any) -> str:
    """What a declared type asks for, in words."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_wanted(h) for h in get_args(hint))
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(hint))
    if is_typeddict(hint):
        return "an object"
    return _SCALARS.get(origin or hint, getattr(hint, "__name__", str(hint)))


@functools.cache
def fields_of(record: type) -> tuple[frozenset[str], dict[str, Any]]:
    """A declared record's required keys and every key's type, read from the declaration."""
    return frozenset(getattr(record, "__required_keys__", ())), get_type_hints(record)


#: what is wrong with a value: the path to the field (built outward as the checks return, so a
#: sound answer builds none) and the sentence's tail ("is a string, not an integer")
Fault = tuple[tuple[str, ...], str]
Check = Callable[[object], Fault | None]


def _mismatch(value: object, hint: Any) -> Fault:
    return ((), f"is {kind_of(value)}, not {_wanted(hint)}")


def _always(value: object) -> Fault | None:
    return None


def _of_type(hint: Any) -> Check:
    """A check of one value against a scalar or bare container type."""
    if hint is float:
        return lambda v: (
            None if isinstance(v, int | float) and not isinstance(v, bool) else _mismatch(v, hint)
        )
    if hint is int:
        return lambda v: (
            None if isinstance(v, int) and not isinstance(v, bool) else _mismatch(v, hint)
        )
    if hint is None or hint is type(None):
        return lambda v: None if v is None else _mismatch(v, hint)
    if isinstance(hint, type):
        return lambda v: None if isinstance(v, hint) else _mismatch(v, hint)
    raise TypeError(f"no check for the declared type {hint!r}")


def _of_list(hint: Any, item: Check) -> Check:
    def check(v: object) -> Fault | None:
        if not isinstance(v, list):
            return _mismatch(v, hint)
        for n, x in enumerate(v):
            f = item(x)
            if f is not None:
                return ((f"[{n}]", *f[0]), f[1])
        return None

    return check


def _of_dict(hint: Any, item: Check) -> Check:
    def check(v: object) -> Fault | None:
        if not isinstance(v, dict):
            return _mismatch(v, hint)
        for key, x in v.items():
            if not isinstance(key, str):
                return ((), f"has a key that is {kind_of(key)}, not a string")
            f = item(x)
            if f is not None:
                return ((f".{key}", *f[0]), f[1])
        return None

    return check


def _of_record(record: type) -> Check:
    required, hints = fields_of(record)
    needed = sorted(required)
    fields = [(k, check_of(h)) for k, h in hints.items()]

    def check(v: object) -> Fault | None:
        if not isinstance(v, dict):
            return ((), f"is {kind_of(v)}, not an object")
        for key in needed:
            if key not in v:
                return ((), f"has no {key}")
        for key, field in fields:
            if key in v:
                f = field(v[key])
                if f is not None:
                    return ((f".{key}", *f[0]), f[1])
        return None

    return check


@functools.cache
def check_of(hint: Any) -> Check:
    """The check of a declared type, made once per type: a record's required keys and each
    declared key's type, a list's items, a dict's values, each member of a union."""
    if hint is Any or hint is object:
        return _always
    if is_typeddict(hint):
        return _of_record(hint)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        members = [check_of(h) for h in args]
        return lambda v: None if any(m(v) is None for m in members) else _mismatch(v, hint)
    if origin is Literal:
        return lambda v: None if v in args else _mismatch(v, hint)
    if (origin or hint) is list:
        return _of_list(hint, check_of(args[0]) if args else _always)
    if (origin or hint) is dict:
        return _of_dict(hint, check_of(args[1]) if args else _always)
    return _of_type(hint)


def refusal(value: object, hint: Any, where: str = "") -> str | None:
    """The first way `value` is not of the declared type `hint`, as a sentence naming the field
    (`where` is its path so far: `results[0]`), or None when it is."""
    f = check_of(hint)(value)
    if f is None:
        return None
    at = (where + "".join(f[0])).lstrip(".")
    return f"{at or 'the answer'} {f[1]}"


def record_refusal(value: object, record: type, where: str = "") -> str | None:
    """The first way `value` is not the declared `record`: not an object, a required key
    missing, a key of another type; None when it is that record."""
    return refusal(value, record, where)


def checked(host: str, answer: object, record: type[R], what: str) -> R:
    """`answer` as the declared `record` when it is one; HostError `bad-answer` naming `what`
    answered (the purge helper), the field and what it held, when it is not."""
    why = record_refusal(answer, record)
    if why is not None:
        raise HostError(
            host, f"the {what} gave an answer the controller cannot read: {why}", "bad-answer"
        )
    return cast(R, answer)
