"""What a launch says: each pre-flight check, the host's pre-flight answer (`Preflight`, read
from the helper's answer and judged on every check a launch needs) and what the launch did
(`LaunchResult`, its `launch --json` document)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fleetdeck.backend.fleet.errors import HostError


class Check(NamedTuple):
    """One pre-flight check: its name (the refusal's reason code), whether it passed, and why."""

    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class Preflight:
    """The host's answer to "may this run start?": every check and the estimate behind them."""

    host: str
    run_path: str
    after: str | None
    checks: tuple[Check, ...]
    estimate: dict[str, Any] = field(default_factory=dict)

    @property
    def missing(self) -> tuple[str, ...]:
        """The checks every launch is judged on that the host's answer lacks: the base model,
        the corpus, the trainer, the output (or the resume), and the chain's run when there is
        one. A verdict over fewer witnesses than these is no pass."""
        names = {c.name for c in self.checks}
        need = ["base-model", "corpus", "trainer"]
        if "resume" not in names:
            need.append("output")
        if self.after:
            need.append("after")
        return tuple(n for n in need if n not in names)

    @property
    def ok(self) -> bool:
        """True when the host answered every check a launch is judged on and each one passed."""
        return bool(self.checks) and not self.missing and all(c.ok for c in self.checks)

    @property
    def refusal(self) -> Check | None:
        """The first failing check (its name is the reason code); `missing-checks` when the
        answer lacks one a launch is judged on; or None."""
        bad = next((c for c in self.checks if not c.ok), None)
        if bad is None and self.missing:
            return Check(
                "missing-checks",
                False,
                "the host's pre-flight answer holds no {} check{}, so "
                "the launch cannot be judged; nothing was started by this check".format(
                    ", ".join(self.missing), "s" if len(self.missing) > 1 else ""
                ),
            )
        return bad

    def checks_json(self) -> list[dict[str, Any]]:
        """The checks as JSON objects."""
        return [c._asdict() for c in self.checks]


@dataclass(frozen=True)
class LaunchResult:
    """What a launch did. `state`: running, queued, cancelled (its prerequisite already ended
    badly), refused (a pre-flight check failed: `reason` is its name) or failed."""

    host: str
    run_path: str
    state: str
    pid: int | None
    preflight: Preflight
    after: str | None = None
    waiter_pid: int | None = None
    run_toml: str | None = None
    error: str | None = None
    reason: str | None = None
    #: set when the helper's answer was lost and the state is what the probe saw afterwards
    warning: str | None = None

    @property
    def ok(self) -> bool:
        """True when the run is running or queued (or, seen after a lost answer, already finished)."""
        return self.state in ("running", "queued", "finished")

    def to_json(self) -> dict[str, Any]:
        """The `launch --json` document."""
        return {
            "host": self.host,
            "run_path": self.run_path,
            "state": self.state,
            "pid": self.pid,
            "after": self.after,
            "waiter_pid": self.waiter_pid,
            "run_toml": self.run_toml,
            "error": self.error,
            "reason": self.reason,
            "preflight": self.preflight.checks_json(),
            "estimate": self.preflight.estimate,
            "warning": self.warning,
        }


def error_text(answer: Mapping[str, Any]) -> str | None:
    err = answer.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err.get("code"))
    return None if err is None else str(err)


def preflight_from(host: str, answer: Mapping[str, Any]) -> Preflight:
    if not isinstance(answer, dict) or "checks" not in answer:
        what = error_text(answer) if isinstance(answer, dict) else repr(answer)
        raise HostError(host, f"launch helper answered without checks: {what}", "helper")
    checks = tuple(
        Check(str(c["name"]), bool(c["ok"]), str(c["message"])) for c in answer["checks"]
    )
    return Preflight(
        host=host,
        run_path=str(answer.get("run_path") or ""),
        after=answer.get("after"),
        checks=checks,
        estimate=dict(answer.get("estimate") or {}),
    )
