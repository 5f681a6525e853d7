"""Remove one schedule from a host: check -> confirm -> back up -> change one thing -> verify -> audit.

"removed" stands only with the host's witness, what it re-read after the change and found gone
(`host/schedules/main.py` says what each kind re-reads); an answer without one is `no-witness`,
never done, and an entry with nothing to remove is refused `nothing-to-remove`.

The host side is `host/schedules/` (stdlib + the host library), run by module name through
`HostLink.call`, so no crontab line, path or unit name is ever pasted into a shell. What a removal needs to know about
the entry (`raw` + `line`, `unit`, `job`, `pid` + `start_time`) comes from the listing; the
helper refuses with `changed-since-listing` when the host no longer matches it.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, replace
from typing import Any

from fleetdeck.backend.actions.audit_records import RemoveRecord, write
from fleetdeck.backend.actions.fronts import schedule_apply, schedule_inspect
from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Schedule, schedule_json
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.schedules import main as schedules_helper
from fleetdeck.backend.host.schedules.wire import ApplyRequest

ACTION = "schedule-remove"
DEFAULT_GRACE = 5.0
# a failed check means the host was left as it was: "refused"; anything else after a change
# may have started is "failed"
REFUSALS = frozenset(
    {
        "not-confirmed",
        "not-found",
        "changed-since-listing",
        "unsupported",
        "crontab-unreadable",
        "crontab-ambiguous",
        "orphaned",
        "permission-denied",
        "nothing-to-remove",
    }
)


#: the host-side helper, bundled with the host library by `HostLink.call`
REMOTE = schedules_helper.__name__


def _error(ans: Any) -> tuple[str, str, dict[str, Any]]:
    """(code, message, extra fields) of a helper's error answer (the host library's one shape)."""
    err = ans.get("error") if isinstance(ans, dict) else None
    if not isinstance(err, dict):
        return "helper-error", "the host's helper gave no answer", {}
    extra = {k: v for k, v in err.items() if k not in ("code", "message")}
    return (
        str(err.get("code") or "helper-error"),
        str(err.get("message") or "no reason given"),
        extra,
    )


@dataclass(frozen=True)
class RemovalCheck:
    """What the host says about an entry before anything changes (the plan of a removal)."""

    host: str
    schedule_id: str
    kind: str
    ok: bool
    reason_code: str | None
    message: str
    #: a loop that is an interactive shell: removing it closes that terminal's session
    interactive: bool = False
    tty: str | None = None
    #: loop: the processes it started, stopped with it ({pid, start_time, command})
    children: tuple[dict[str, Any], ...] = ()
    #: crontab / cron-file: the whole file as it is now, for the controller's backup
    original: bytes | None = None
    sha256: str | None = None
    backup_name: str | None = None

    @property
    def warning(self) -> str | None:
        """A sentence the operator must see before confirming, or None."""
        if self.interactive:
            return (
                f"process {self.schedule_id} is an interactive shell on {self.tty or 'a terminal'}: "
                "stopping it closes that terminal session"
            )
        return None


@dataclass(frozen=True)
class RemoveReport:
    """The outcome of one removal; `ok` only when the change was made and verified."""

    host: str
    schedule_id: str
    kind: str
    ok: bool
    reason_code: str | None
    message: str
    #: copy of the edited file kept on the controller, and the one kept on the host
    backup: str | None = None
    host_backup: str | None = None
    signals: tuple[str, ...] = ()
    interactive: bool = False

    @property
    def result(self) -> str:
        """`done`, `refused` (nothing changed) or `failed`."""
        if self.ok:
            return "done"
        return "refused" if self.reason_code in REFUSALS else "failed"

    def to_json(self) -> dict[str, Any]:
        """The report as `schedules remove --json` prints it."""
        return {
            "host": self.host,
            "id": self.schedule_id,
            "kind": self.kind,
            "removed": self.ok,
            "result": self.result,
            "reason_code": self.reason_code,
            "message": self.message,
            "backup": self.backup,
            "host_backup": self.host_backup,
            "signals": list(self.signals),
            "interactive": self.interactive,
        }


def _listed(schedule: Schedule) -> dict[str, Any]:
    """The entry as it was listed: what the helper checks it against."""
    s = schedule
    return {
        "id": s.id,
        "kind": s.kind,
        "user": s.user,
        "command": s.command,
        "source": s.source,
        "raw": s.raw,
        "line": s.line,
        "unit": s.unit,
        "job": s.job,
        "scope": s.scope,
        "pid": s.pid,
        "start_time": s.start_time,
    }


async def check_removal(link: HostLink, schedule: Schedule) -> RemovalCheck:
    """Ask the host whether the entry is still exactly what was listed (changes nothing)."""
    base: dict[str, Any] = dict(host=link.name, schedule_id=schedule.id, kind=schedule.kind)
    try:
        ans = await schedule_inspect(link, {"schedule": _listed(schedule)}, helper=REMOTE)
    except HelperError as e:
        code, message, _ = _error(e.answer)
        return RemovalCheck(**base, ok=False, reason_code=code, message=message)
    except HostError as e:  # bad-answer: the helper answered in another shape than its record
        bad = e.code == "bad-answer"
        code, said = (e.code, f"{e}; nothing was changed") if bad else ("host-unreachable", str(e))
        return RemovalCheck(**base, ok=False, reason_code=code, message=said)
    original = base64.b64decode(ans["original_b64"]) if "original_b64" in ans else None
    return RemovalCheck(
        **base,
        ok=True,
        reason_code=None,
        message=f"{ans.get('what', schedule.id)} matches the listing",
        interactive=bool(ans.get("interactive")),
        tty=ans.get("tty"),
        original=original,
        sha256=ans.get("sha256"),
        backup_name=ans.get("backup_name"),
        children=tuple(c for c in ans.get("children") or () if isinstance(c, dict)),
    )


def describe_removal(schedule: Schedule, grace: float = DEFAULT_GRACE) -> str:
    """What a removal of `schedule` will do, in one sentence (pure; for the plan and the modal)."""
    s = schedule
    if s.kind == "crontab":
        return (
            f"re-read the crontab of {s.user}, check line {s.line} still reads as listed, back it up "
            "here and on the host, install it without that line"
        )
    if s.kind == "cron-file":
        return (
            f"re-read {s.source}, check line {s.line} still reads as listed, back it up here and on "
            "the host, rewrite it atomically without that line (mode and owner kept)"
        )
    if s.kind == "systemd-timer":
        return f"systemctl{' --user' if s.scope == 'user' else ''} disable --now {s.unit}"
    if s.kind == "at":
        return f"check `at -c {s.job}` still runs the listed command, then atrm {s.job}"
    if s.kind == "loop":
        return (
            f"check pid {s.pid} still has start time {s.start_time}, send SIGTERM to it and to every "
            f"process it started, SIGKILL to any still alive after {grace:g} s, and check none is left"
        )
    return f"no way to remove a schedule of kind {s.kind!r}"


def _write_backup(host: str, name: str, data: bytes) -> str:
    d = statedir.state_dir() / "backups" / host
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = d / os.path.basename(name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return str(path)


def _recordable(v: Any) -> Any:
    """`v` with every string that holds undecodable bytes (surrogateescape) shown escaped: the
    audit log is UTF-8 text; the exact bytes are in the backups."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return shown(v)
        return v
    if isinstance(v, dict):
        return {k: _recordable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_recordable(x) for x in v]
    return v


def _audit(
    report: RemoveReport,
    schedule: Schedule,
    confirmation: str | None,
    result: str | None = None,
    **extra: Any,
) -> None:
    write(
        RemoveRecord(
            host=report.host,
            result=result or report.result,
            schedule=_recordable(schedule_json(schedule)),
            confirmation=_recordable(confirmation),
            reason_code=_recordable(report.reason_code),
            message=_recordable(report.message),
            backup=_recordable(report.backup),
            host_backup=_recordable(report.host_backup),
            signals=_recordable(list(report.signals)),
            extra=_recordable(extra),
        )
    )


async def remove_schedule(
    link: HostLink,
    schedule: Schedule,
    confirmation: str | None,
    *,
    grace: float = DEFAULT_GRACE,
    host_backup_dir: str | None = None,
) -> RemoveReport:
    """Remove `schedule` from its host when `confirmation` equals its id byte for byte.

    Crontab and cron-file entries are re-read and must still hold `raw` at `line`; the whole
    file is backed up on the controller (under the state dir) and on the host (default
    `~/.local/state/fleetdeck/backups/`) before the edited file is installed. Timers are
    disabled with `--now`, at jobs removed with `atrm` after `at -c` still matches, loops
    signalled (SIGTERM, SIGKILL after `grace` seconds) only while their start time matches.
    Every outcome is appended to the audit log: the intent before the host is touched and
    the result after. Never raises for an expected failure.
    """
    host = link.name
    base = RemoveReport(
        host=host,
        schedule_id=schedule.id,
        kind=schedule.kind,
        ok=False,
        reason_code=None,
        message="",
    )
    if confirmation is None or confirmation != schedule.id:
        said = (
            "no confirmation was given"
            if confirmation is None
            else "the confirmation did not match"
        )
        rep = replace(
            base,
            reason_code="not-confirmed",
            message=f"{said} (type the id {schedule.id!r} back exactly); nothing was changed",
        )
        _audit(rep, schedule, confirmation)
        return rep
    _audit(base, schedule, confirmation, result="started", plan=describe_removal(schedule, grace))
    check = await check_removal(link, schedule)
    checks = {
        "matches_listing": check.ok,
        "reason_code": check.reason_code,
        "sha256": check.sha256,
        "interactive": check.interactive,
        "tty": check.tty,
    }
    if not check.ok:
        rep = replace(
            base,
            reason_code=check.reason_code,
            message=f"{check.message}; nothing was changed"
            if check.reason_code in REFUSALS
            else check.message,
        )
        _audit(rep, schedule, confirmation, checks=checks)
        return rep
    backup = None
    if check.original is not None:
        try:
            backup = _write_backup(
                host, check.backup_name or f"{schedule.kind}-{schedule.id}", check.original
            )
        except OSError as e:
            rep = replace(
                base,
                reason_code="backup-failed",
                message=f"cannot write the controller's backup: {e.strerror or e}; nothing was changed",
            )
            _audit(rep, schedule, confirmation, checks=checks)
            return rep
    req: ApplyRequest = {"schedule": _listed(schedule), "grace": grace}
    if check.sha256:
        req["sha256"] = check.sha256
    if check.backup_name:
        req["backup_name"] = check.backup_name
    if host_backup_dir:
        req["backup_dir"] = host_backup_dir
    timeout = link.host.command_timeout + grace + 15
    try:
        ans = await schedule_apply(link, req, within=timeout, helper=REMOTE)
    except HelperError as e:
        code, message, more = _error(e.answer)
        rep = replace(
            base,
            backup=backup,
            host_backup=more.get("host_backup"),
            reason_code=code,
            message=message,
        )
    except HostError as e:
        rep = replace(
            base,
            backup=backup,
            reason_code="bad-answer" if e.code == "bad-answer" else "host-unreachable",
            message=f"{e}; the removal may or may not have happened, list the host again",
        )
        _audit(rep, schedule, confirmation, checks=checks)
        return rep
    else:
        witness = ans.get("witness")
        seen = (
            isinstance(witness, dict)
            and witness.get("gone") is True
            and isinstance(witness.get("said"), str)
            and witness["said"].strip()
        )
        rep = replace(
            base,
            ok=bool(seen),
            backup=backup,
            host_backup=ans.get("host_backup"),
            message=str(ans.get("message") or "done")
            if seen
            else (
                f"the host said {str(ans.get('message') or 'done')!r} but named no witness (what it "
                "re-read and found gone): not taken as removed; list the host again"
            ),
            reason_code=None if seen else "no-witness",
            signals=tuple(ans.get("signals") or ()),
            interactive=bool(ans.get("interactive")),
        )
    if rep.reason_code in REFUSALS:
        rep = replace(rep, message=f"{rep.message}; nothing was changed")
    _audit(rep, schedule, confirmation, checks=checks)
    return rep


__all__ = [
    "REMOTE",
    "RemovalCheck",
    "RemoveReport",
    "check_removal",
    "describe_removal",
    "remove_schedule",
]
