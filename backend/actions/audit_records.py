"""Audit records declared once: one frozen dataclass per kind of action, written through it
(`write`) and read back into it (`parse`), so a writer and a reader can no longer disagree on a
key. The line on disk is the one `audit.audit` always wrote (`CONTRACT.md`: one JSON object a
line, `time`, `ts`, `user`, `controller`, `host`, `action`, `result`, then the action's fields,
in the order the dataclass declares them).

A field listed in a kind's `OMITTED` is left out of the line while it is None (a refused
acknowledgement has no hosts; an acknowledged one no reason), and a field a record names in its
`absent` is left out whatever it holds (what a writer does not know at all), so each kind's
lines keep the keys they had. A record of a kind not declared here, or written before a field existed, still
reads: unknown keys are kept in `extra`, missing ones are None.

Declared so far: `purge` (`PurgeRecord`), `process-stop` (`StopRecord`), `schedule-ack`
(`AckRecord`),
`schedule-remove` (`RemoveRecord`), `silence-add` and `silence-expire` (`SilenceAddRecord`,
`SilenceExpireRecord`), `launch` (`LaunchRecord`), `launch-outcome` (`LaunchOutcomeRecord`),
`mirror` (`MirrorRecord`). Any other kind reads as `OtherRecord`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fleetdeck.backend.actions import audit as log
from fleetdeck.backend.actions.audit import COMMON

#: the fields every record has that are not its action's own
BASE = frozenset({"host", "result", "stamp", "extra", "absent"})


@dataclass(frozen=True)
class Stamp:
    """Who and when, added by the log when a record is written."""

    time: str
    ts: float | None
    user: str
    controller: str


@dataclass(frozen=True, kw_only=True)
class Record:
    """What every record has: its host (None: not one host), its result word, the stamp it
    was written with (None until written), and any keys its kind does not declare."""

    ACTION: ClassVar[str] = ""
    OMITTED: ClassVar[frozenset[str]] = frozenset()

    host: str | None
    result: str
    stamp: Stamp | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: declared fields this record does not carry at all (a launch that failed before the host
    #: answered has no pid): left out of its line; a line read back names the ones it lacked
    absent: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def action(self) -> str:
        return self.ACTION

    def fields(self) -> dict[str, Any]:
        """The action's own fields, in their declared order, then the extra ones."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in BASE or f.name in self.absent:
                continue
            v = getattr(self, f.name)
            if v is None and f.name in self.OMITTED:
                continue
            out[f.name] = v
        out.update(self.extra)
        return out


@dataclass(frozen=True, kw_only=True)
class StopRecord(Record):
    """A process stopped (or refused, or failed) from the dashboard's Processes view."""

    ACTION: ClassVar[str] = "process-stop"

    pid: int | None = None
    start: int | None = None
    command: str | None = None
    signal: str | None = None
    outcome: str | None = None
    reason: str | None = None
    message: str | None = None
    via: str | None = None


@dataclass(frozen=True, kw_only=True)
class AckRecord(Record):
    """Schedules acknowledged (`done`: `ids`, which `hosts` each was acknowledged on, whether
    on every host) or an acknowledgement refused (`refused`: its `reason_code` and `message`)."""

    ACTION: ClassVar[str] = "schedule-ack"
    OMITTED: ClassVar[frozenset[str]] = frozenset({"hosts", "all_hosts", "reason_code", "message"})

    ids: list[str] | None = None
    hosts: dict[str, list[str]] | None = None
    all_hosts: bool | None = None
    reason_code: str | None = None
    message: str | None = None
    via: str | None = None


@dataclass(frozen=True, kw_only=True)
class LaunchRecord(Record):
    """A launch: the run folder, its pid and state as the host answered, the run it waits for
    (`after`), how it was asked, the pre-flight checks, and why it was refused or failed. Each
    writer names what it does not know in `absent` (a launch that failed before the host
    answered: no pid, state, waiter or pre-flight; one the probe saw: no waiter or pre-flight)."""

    ACTION: ClassVar[str] = "launch"

    run: str | None = None
    pid: int | None = None
    state: str | None = None
    after: str | None = None
    force: bool | None = None
    resume: bool | None = None
    waiter_pid: int | None = None
    preflight: list[dict[str, Any]] | None = None
    error: str | None = None
    reason: str | None = None
    warning: str | None = None


@dataclass(frozen=True, kw_only=True)
class MirrorRecord(Record):
    """A mirror from `src` to `dst` (the host is the destination's): started (what is to be
    copied), failed mid-copy (what was relayed), or its end (what was copied and verified, and
    by how many witnesses). Each writer names what it does not know yet in `absent`."""

    ACTION: ClassVar[str] = "mirror"

    src: str | None = None
    dst: str | None = None
    bytes: int | None = None
    bytes_src: int | None = None
    bytes_dst: int | None = None
    files: int | None = None
    dirs: int | None = None
    verified: bool | None = None
    witnesses: int | None = None
    reason: str | None = None
    error: str | None = None
    seconds: float | None = None
    outside_links: list[list[str]] | None = None
    free_bytes_before: int | None = None
    free_bytes_after: int | None = None
    replace: bool | None = None
    kept_as: str | None = None
    confirmation: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class PurgeRecord(Record):
    """A purge, whatever its result (`dry-run`, `started`, `refused`, `done`, `unverified`,
    `failed`): every path with its size, checks, refusals and fate; the keepers with their
    hashes; what was typed; free space (`purge_report.purge_record` builds it from the plan)."""

    ACTION: ClassVar[str] = "purge"

    paths: list[dict[str, Any]] | None = None
    keepers: list[dict[str, Any]] | None = None
    confirmation: dict[str, Any] | None = None
    keep_newest: dict[str, Any] | None = None
    witnesses: int | None = None
    allow_best: list[str] | None = None
    evals: list[dict[str, Any]] | None = None
    bytes: int | None = None
    expected_bytes: int | None = None
    free_bytes_before: int | None = None
    free_bytes_after: int | None = None
    reclaimed_bytes: int | None = None
    warnings: list[str] | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class RemoveRecord(Record):
    """A schedule removed, or its removal started, refused or failed: the schedule as listed,
    what was typed, the reason, the backups made, the signals sent (a refusal before anything
    was looked at has none of these: null). The plan or the checks go in `extra`."""

    ACTION: ClassVar[str] = "schedule-remove"

    schedule: dict[str, Any] | None = None
    confirmation: str | None = None
    reason_code: str | None = None
    message: str | None = None
    backup: str | None = None
    host_backup: str | None = None
    signals: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class SilenceAddRecord(Record):
    """A silence added: its id, what it matches, for how long, why, and its scope in words."""

    ACTION: ClassVar[str] = "silence-add"
    OMITTED: ClassVar[frozenset[str]] = frozenset({"error"})

    error: str | None = None
    id: str | None = None
    rule: str | None = None
    subject: str | None = None
    for_s: float | None = None
    ends: float | None = None
    comment: str | None = None
    scope: str | None = None


@dataclass(frozen=True, kw_only=True)
class SilenceExpireRecord(Record):
    """A silence ended before its time: its id, scope, and when it was to end."""

    ACTION: ClassVar[str] = "silence-expire"
    OMITTED: ClassVar[frozenset[str]] = frozenset({"error"})

    error: str | None = None
    id: str | None = None
    scope: str | None = None
    ends_was: float | None = None


@dataclass(frozen=True, kw_only=True)
class LaunchOutcomeRecord(Record):
    """How a launched run ended, as `watch` saw it (the result is the run's state)."""

    ACTION: ClassVar[str] = "launch-outcome"

    run: str | None = None
    name: str | None = None
    reason: str | None = None
    step: int | None = None
    max_steps: int | None = None
    adapter: str | None = None


@dataclass(frozen=True, kw_only=True)
class OtherRecord(Record):
    """A record of a kind not declared here: its action word, its fields all in `extra`."""

    kind: str = ""

    @property
    def action(self) -> str:
        return self.kind

    def fields(self) -> dict[str, Any]:
        return dict(self.extra)


KINDS: dict[str, type[Record]] = {
    k.ACTION: k
    for k in (
        StopRecord,
        AckRecord,
        LaunchRecord,
        MirrorRecord,
        PurgeRecord,
        RemoveRecord,
        SilenceAddRecord,
        SilenceExpireRecord,
        LaunchOutcomeRecord,
    )
}


def write(rec: Record) -> Record:
    """Append `rec` to the audit log (`audit.audit`: whole and fsynced, or AuditError) and
    return it with its stamp."""
    # through the module, so a fault injected into `audit.audit` reaches every writer
    line = log.audit(rec.action, rec.host, rec.result, **rec.fields())
    return dataclasses.replace(rec, stamp=_stamp(line))


def _stamp(d: Mapping[str, Any]) -> Stamp:
    ts = d.get("ts")
    return Stamp(
        time=str(d.get("time") or ""),
        ts=float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None,
        user=str(d.get("user") or "?"),
        controller=str(d.get("controller") or ""),
    )


def parse(d: Mapping[str, Any]) -> Record:
    """One line of the log (a JSON object) as its kind's record: declared keys into fields
    (missing ones None), the rest into `extra`."""
    action = str(d.get("action") or "")
    raw_host = d.get("host")
    host = raw_host if isinstance(raw_host, str) else None
    result, stamp = str(d.get("result") or ""), _stamp(d)
    kind = KINDS.get(action)
    if kind is None:
        extra = {k: v for k, v in d.items() if k not in COMMON}
        return OtherRecord(kind=action, host=host, result=result, stamp=stamp, extra=extra)
    names = {f.name for f in dataclasses.fields(kind)} - BASE
    own = {k: d[k] for k in names if k in d}
    extra = {k: v for k, v in d.items() if k not in COMMON and k not in names}
    absent = frozenset(names - set(d))
    return kind(host=host, result=result, stamp=stamp, extra=extra, absent=absent, **own)


__all__ = [
    "KINDS",
    "AckRecord",
    "LaunchOutcomeRecord",
    "LaunchRecord",
    "MirrorRecord",
    "OtherRecord",
    "PurgeRecord",
    "Record",
    "RemoveRecord",
    "SilenceAddRecord",
    "SilenceExpireRecord",
    "Stamp",
    "StopRecord",
    "parse",
    "write",
]
