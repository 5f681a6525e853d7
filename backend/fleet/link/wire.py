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


def refusal(value: object, hint: Any, where: str) -> str | None:
    """The first way `value` is not of the declared type `hint` (a sentence naming the field at
    `where`), or None when it is."""
    if hint is Any or hint is object:
        return None
    if is_typeddict(hint):
        return record_refusal(value, hint, where)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        if any(refusal(value, h, where) is None for h in args):
            return None
    elif origin is Literal:
        if value in args:
            return None
    elif (origin or hint) is list:
        if isinstance(value, list):
            for n, item in enumerate(value) if args else ():
                why = refusal(item, args[0], f"{where}[{n}]")
                if why is not None:
                    return why
            return None
    elif (origin or hint) is dict:
        if isinstance(value, dict):
            for key, item in value.items() if args else ():
                if not isinstance(key, str):
                    return f"{where} has a key that is {kind_of(key)}, not a string"
                why = refusal(item, args[1], f"{where}.{key}")
                if why is not None:
                    return why
            return None
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return None
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return None
    elif hint is None or hint is type(None):
        if value is None:
            return None
    elif isinstance(hint, type):
        if isinstance(value, hint):
            return None
    else:
        raise TypeError(f"no check for the declared type {hint!r} (at {where})")
    return f"{where} is {kind_of(value)}, not {_wanted(hint)}"


def record_refusal(value: object, record: type, where: str = "") -> str | None:
    """The first way `value` is not the declared `record`: not an object, a required key
    missing, a key of another type; None when it is that record."""
    if not isinstance(value, dict):
        return f"{where or 'the answer'} is {kind_of(value)}, not an object"
    required, hints = fields_of(record)
    for key in sorted(required):
        if key not in value:
            return f"{where or 'the answer'} has no {key}"
    for key, hint in hints.items():
        if key in value:
            why = refusal(value[key], hint, f"{where}.{key}" if where else key)
            if why is not None:
                return why
    return None


def checked(host: str, answer: object, record: type[R], what: str) -> R:
    """`answer` as the declared `record` when it is one; HostError `bad-answer` naming `what`
    answered (the purge helper), the field and what it held, when it is not."""
    why = record_refusal(answer, record)
    if why is not None:
        raise HostError(
            host, f"the {what} gave an answer the controller cannot read: {why}", "bad-answer"
        )
    return cast(R, answer)
