"""A purge's typed confirmations: each path (under the keep rule: the run's path) typed back
byte for byte, and the refusal that says what was typed when it was not."""

from __future__ import annotations

from fleetdeck.backend.actions.purge.plan import PurgePlan, Refusal
from fleetdeck.backend.host.lib.text import shown


def confirmations_match(plan: PurgePlan, typed: dict[str, str]) -> bool:
    """True when every path of the plan (under the keep rule: the run's path) was typed back
    exactly, byte for byte."""
    return bool(plan.paths) and all(typed_matches(t, typed) for t in plan.confirm_texts())


def path_confirmed(plan: PurgePlan, path: str, typed: dict[str, str]) -> bool:
    return typed_matches(plan.keep.run if plan.keep is not None else path, typed)


def typed_matches(path: str, typed: dict[str, str]) -> bool:
    given = typed.get(path)
    return isinstance(given, str) and given.encode("utf-8", "surrogateescape") == path.encode(
        "utf-8", "surrogateescape"
    )


def not_confirmed(path: str, typed: dict[str, str]) -> Refusal:
    if typed.get(path) is None:
        return Refusal(
            "not-confirmed",
            "no confirmation was given for it (type the path exactly, or pass --confirm PATH)",
        )
    return Refusal(
        "not-confirmed",
        f"the confirmation did not match: typed {shown(typed[path])}, the path is {shown(path)}",
    )


def typed_for(path: str, typed: dict[str, str]) -> str | None:
    v = typed.get(path)
    return v if isinstance(v, str) else None
