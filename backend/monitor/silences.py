"""Silences: "not now" for a host, a rule, a subject, for a while.

A silence names any of a host, a rule and a subject (at least one) and lasts `--for` a bounded
while. An alert it matches still fires and still shows (the Alerts view and `fleetdeck alerts`
mark it, with who made the silence and until when) but is not delivered while the silence
lasts (`deliver.Deliverer` holds its transitions in the outbox). A silence naming only a host
is that host's maintenance window. When a silence ends, on its own or by `silence expire`, what
it held is delivered, unless the alert fired and resolved within it: that pair is dropped, the
operator having said they did not want to hear of it. The subject matches exactly, or as a
shell-style pattern when it holds `*`, `?` or `[` (`/runs/run-7*`).

Silences live in `$XDG_STATE_HOME/fleetdeck/silences.json`, `{"silences": [...]}`. Every change
(`add_silence`, `expire_silence`: the CLI and the dashboard alike) is audited before it is
made (`silence-add`, `silence-expire`; a change that cannot be audited is not made) and is a
read-modify-write under an exclusive `flock` on `silences.lock`, the file replaced atomically.
Loading is strict per entry, like `alerts.json`: a file past `FILE_LIMIT` or not a JSON object,
and each entry that does not hold what it must (a wrong type, a non-finite time, an end before
its start), is quarantined by the writers and by `watch` (moved to the quarantine folder with
a warning naming it, `alert_state`), skipped with a warning by the other readers; the rest loads.

Bounds: `--for` from `FOR_MIN` to `FOR_MAX`; at most `ACTIVE_MAX` silences at once; comments of
at most `COMMENT_MAX` characters, subjects of `SUBJECT_MAX`; ended silences are kept for
`silence list` for `KEEP_ENDED_S`, the newest `KEEP_ENDED` of them.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.audit_records import SilenceAddRecord, SilenceExpireRecord, write
from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.alert_rules import RULES
from fleetdeck.backend.fleet.bounds import DAY
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor import alert_state as st
from fleetdeck.backend.monitor.alert_state import Bad, Reject
from fleetdeck.backend.monitor.silence_model import (
    COMMENT_MAX,
    SUBJECT_MAX,
    Silence,
    SilenceRefused,
    matches_everything,
    silence_from_json,
)

#: the shortest and the longest silence (a month: longer is a rule to disable in the fleet file)
FOR_MIN = 60.0
FOR_MAX = 30 * DAY
#: silences in force at once
ACTIVE_MAX = 100
#: ended silences kept for `silence list`: for a week, the newest 200
KEEP_ENDED_S = 7 * DAY
KEEP_ENDED = 200
#: silences.json larger than this is not read (a silence is a few hundred bytes)
FILE_LIMIT = 4 * 2**20


def silences_path() -> Path:
    """Where the silences are kept."""
    return statedir.state_dir() / "silences.json"


def _lock_path() -> Path:
    return statedir.state_dir() / "silences.lock"


def load_silences(
    *, move: bool = False, path: Path | None = None
) -> tuple[list[Silence], list[str]]:
    """Every saved silence and the warnings its file gave (see the module docstring). With
    `move` (a writer holding the lock, or `watch`), what is bad is quarantined and the file
    rewritten without it."""
    path = path or silences_path()
    doc, warnings = st.read_doc(path, move=move, limit=FILE_LIMIT)
    out: list[Silence] = []
    rejects: list[Reject] = []
    items = doc.get("silences", [])
    if not isinstance(items, list):
        rejects.append(Reject("silences", f"is not a list ({type(items).__name__})", items))
        items = []
    for i, x in enumerate(items):
        try:
            out.append(silence_from_json(x, now=time.time()))
        except Bad as e:
            rejects.append(Reject(f"silences[{i}]", str(e), x))
    warnings += st.report_rejects(path.name, rejects, move=move)
    if rejects and move:
        _save(out, path)
    return out, warnings


def _save(silences: list[Silence], path: Path | None = None) -> None:
    path = path or silences_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = json.dumps({"silences": [s.to_json() for s in silences]}, ensure_ascii=True, indent=1)
    with open(tmp, "w", encoding="ascii") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _kept(silences: list[Silence], now: float) -> list[Silence]:
    """The silences in force, and the newest ended ones within KEEP_ENDED_S."""
    live = [s for s in silences if s.ends > now]
    ended = sorted(
        (s for s in silences if s.ends <= now and now - s.ends < KEEP_ENDED_S),
        key=lambda s: -s.ends,
    )
    return live + ended[:KEEP_ENDED]


class _Locked:
    """The silences under the lock: read (bad entries quarantined), changed, saved."""

    def __enter__(self) -> tuple[list[Silence], list[str]]:
        self._f = open(_lock_path(), "a")
        fcntl.flock(self._f, fcntl.LOCK_EX)
        return load_silences(move=True)

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def add_silence(
    *,
    host: str | None = None,
    rule: str | None = None,
    subject: str | None = None,
    duration: float,
    comment: str,
    now: float | None = None,
    warn: Callable[[str], None] | None = None,
) -> Silence:
    """Add a silence from now for `duration` seconds, audited (`silence-add`) before it is saved.
    Raises SilenceRefused (a bound, nothing to match, an unknown rule) or `audit.AuditError`."""
    given_now = now
    host, rule, subject = host or None, rule or None, subject or None
    comment = (comment or "").strip()
    if matches_everything(host, rule, subject):
        raise SilenceRefused(
            "a silence names a host, a rule or a subject (or more): one that matched "
            "everything (no host, no rule, and a subject of only wildcards) would hide every "
            "alert of the fleet"
        )
    if rule is not None and rule not in RULES:
        raise SilenceRefused(f"unknown rule {shown(rule)!r} (rules: {', '.join(RULES)})")
    if not comment:
        raise SilenceRefused("a silence needs a comment saying why (--comment TEXT)")
    if len(comment) > COMMENT_MAX:
        raise SilenceRefused(f"the comment is {len(comment)} characters; at most {COMMENT_MAX}")
    if subject is not None and len(subject) > SUBJECT_MAX:
        raise SilenceRefused(f"the subject is {len(subject)} characters; at most {SUBJECT_MAX}")
    if not FOR_MIN <= duration <= FOR_MAX:
        raise SilenceRefused(
            f"a silence lasts from {FOR_MIN:g} s to {FOR_MAX / DAY:g} days, not {duration:g} s "
            "(longer than a month is a rule to disable in the fleet file's [alerts])"
        )
    with _Locked() as (silences, said):
        # the clock is read under the lock: a writer that waited for it counts every silence
        # added meanwhile as in force (read before, they started "in the future")
        now = time.time() if given_now is None else given_now
        for line in said:
            (warn or (lambda _w: None))(line)
        active = [s for s in silences if s.active(now)]
        if len(active) >= ACTIVE_MAX:
            raise SilenceRefused(
                f"{len(active)} silences are in force, the most there may be ({ACTIVE_MAX}); "
                "expire one first (fleetdeck silence list)"
            )
        s = Silence(
            f"s-{secrets.token_hex(6)}",
            host,
            rule,
            subject,
            now,
            now + duration,
            comment,
            audit.user(),
        )
        rec = SilenceAddRecord(
            host=host,
            result="done",
            id=s.id,
            rule=rule,
            subject=subject,
            for_s=duration,
            ends=s.ends,
            comment=comment,
            scope=s.scope,
        )
        write(rec)
        _save_or_say(rec, _kept([*silences, s], now))
    return s


def expire_silence(
    sid: str, now: float | None = None, warn: Callable[[str], None] | None = None
) -> Silence:
    """End silence `sid` now, audited (`silence-expire`) before it is saved; the silence as it is
    now. Raises SilenceRefused for an unknown id or one that already ended, or `audit.AuditError`."""
    given_now = now
    with _Locked() as (silences, said):
        now = time.time() if given_now is None else given_now
        for line in said:
            (warn or (lambda _w: None))(line)
        found = next((s for s in silences if s.id == sid), None)
        if found is None:
            raise SilenceRefused(
                f"no silence with id {shown(sid)} (fleetdeck silence list shows them)"
            )
        if not found.active(now):
            raise SilenceRefused(
                f"silence {found.id} ({found.scope}) already ended at "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(found.ends))}"
            )
        user = audit.user()
        rec = SilenceExpireRecord(
            host=found.host, result="done", id=found.id, scope=found.scope, ends_was=found.ends
        )
        write(rec)
        ended = replace(found, ends=now, expired_by=user)
        _save_or_say(rec, _kept([ended if s.id == sid else s for s in silences], now))
    return ended


def _save_or_say(rec: SilenceAddRecord | SilenceExpireRecord, silences: list[Silence]) -> None:
    """Save the silences the audited change made; if that fails, the audit log says so too."""
    try:
        _save(silences)
    except OSError as e:
        try:
            write(replace(rec, result="failed", error=str(e)))
        except OSError:
            pass
        raise SilenceRefused(
            f"{silences_path()} could not be written ({e.strerror or e}); nothing changed"
        ) from None


class SilenceStore:
    """The saved silences as a reader sees them, read again only when the file changed
    (`refresh`: one `stat`). `move` quarantines what is bad (`watch`); otherwise it is skipped
    with a warning to `warn`."""

    def __init__(
        self,
        *,
        move: bool = False,
        warn: Callable[[str], None] | None = None,
        path: Path | None = None,
    ) -> None:
        self.move = move
        self.warn = warn or (lambda _w: None)
        self.path = path
        self.silences: list[Silence] = []
        self._key: tuple[int, int, int] | None = None

    def refresh(self) -> bool:
        """Read the file again when it changed; True when what it holds may have."""
        path = self.path or silences_path()
        try:
            s = path.stat()
            key = (s.st_ino, s.st_mtime_ns, s.st_size)
        except OSError:
            key = None
        if key == self._key:
            return False
        self._key = key
        if key is None:
            self.silences = []
            return True
        if self.move:
            with _Locked() as (silences, said):
                pass
        else:
            silences, said = load_silences(path=path)
        for line in said:
            self.warn(line)
        self.silences = silences
        if self.move and said:  # the quarantine rewrote it: that is what we read
            self._key = None
        return True

    def active(self, now: float | None = None) -> list[Silence]:
        """The silences in force at `now`, ending soonest first."""
        now = time.time() if now is None else now
        return sorted((s for s in self.silences if s.active(now)), key=lambda s: s.ends)

    def matching(
        self, rule: str, host: str, subject: str, now: float | None = None
    ) -> Silence | None:
        """The silence in force that names this alert and ends last, or None."""
        now = time.time() if now is None else now
        hits = [s for s in self.silences if s.active(now) and s.matches(rule, host, subject)]
        return max(hits, key=lambda s: s.ends) if hits else None

    def of(self, alert: Any, now: float | None = None) -> Silence | None:
        """The silence in force over `alert` (anything with rule, host and subject), or None."""
        return self.matching(str(alert.rule), str(alert.host), str(alert.subject), now)


__all__ = [
    "ACTIVE_MAX",
    "FILE_LIMIT",
    "FOR_MAX",
    "FOR_MIN",
    "KEEP_ENDED",
    "KEEP_ENDED_S",
    "SilenceStore",
    "add_silence",
    "expire_silence",
    "load_silences",
    "silences_path",
]
