"""One silence, as `silences.json` holds it: what it matches (a host, a rule, a subject: exactly,
or as a shell-style pattern), from when until when, why and who, and its strict reading
(`silence_from_json`: `Bad` names the field that is wrong). The store, its lock and its bounds
on what may be added are `silences.py`."""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass
from typing import Any

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor import alert_state as st
from fleetdeck.backend.monitor.alert_state import Bad

COMMENT_MAX = 500
SUBJECT_MAX = 1024
#: what makes a subject a shell pattern (here, and in an Alertmanager silence)
PATTERN_CHARS = frozenset("*?[")


class SilenceRefused(ValueError):
    """A silence that cannot be added or expired; the message says why in one sentence."""


@dataclass(frozen=True)
class Silence:
    """One silence: what it matches (None matches anything), from when until when, why and who."""

    id: str
    host: str | None
    rule: str | None
    subject: str | None
    starts: float
    ends: float
    comment: str
    #: the user who made it (the audit record's `user`)
    by: str
    #: who ended it before its time (`silence expire`), or None
    expired_by: str | None = None

    def active(self, now: float) -> bool:
        return self.starts <= now < self.ends

    def matches(self, rule: str, host: str, subject: str) -> bool:
        """True when an alert of `rule` on `host` about `subject` is one this silence names."""
        if self.host is not None and host != self.host:
            return False
        if self.rule is not None and rule != self.rule:
            return False
        if self.subject is None:
            return True
        # a subject is typed as it is shown (escaped: a run folder named with an ESC or a
        # newline reads `\x1b`, `\n`), so it matches the subject or its shown form
        said = shown(subject)
        if self.subject in (subject, said):
            return True
        if PATTERN_CHARS & set(self.subject):
            return fnmatch.fnmatchcase(subject, self.subject) or fnmatch.fnmatchcase(
                said, self.subject
            )
        return False

    @property
    def scope(self) -> str:
        """What it silences, in words: `host h1 (maintenance)`, `run-stalled on h1`..."""
        if self.host and not self.rule and not self.subject:
            return f"host {self.host} (maintenance)"
        parts = [self.rule or "every rule"]
        if self.subject:
            parts.append(f"about {shown(self.subject)}")
        parts.append(f"on {self.host}" if self.host else "on every host")
        return " ".join(parts)

    def state(self, now: float) -> str:
        """`active`, `expired` (ended early by `silence expire`) or `ended` (its time ran out)."""
        if self.active(now) or now < self.starts:
            return "active"
        return "expired" if self.expired_by else "ended"

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        d = asdict(self)
        if now is not None:
            d["state"] = self.state(now)
        return d


#: subjects an "everything" pattern is tried on: a host, a GPU, a run path, odd characters
_ANY_SUBJECTS = ("x", "gx10", "GPU0 Xid 79", "/home/op/runs/run-7", "[", "*", "?", "-" * 300)
#: how far a silence may reach: from a day ago to a month ahead (on add and on read)
PAST_MAX = 86400.0
AHEAD_MAX = 30 * 86400.0


def matches_everything(host: str | None, rule: str | None, subject: str | None) -> bool:
    """True when a silence of these matchers would match every alert of the fleet: no host, no
    rule, and no subject or one that every subject matches (`*`, `**`, `?*`, ...). The one rule
    `add`, the file reader and the view's form refuse by."""
    if host or rule:
        return False
    if not subject:
        return True
    if not (PATTERN_CHARS & set(subject)):
        return False
    return all(fnmatch.fnmatchcase(s, subject) for s in _ANY_SUBJECTS)


def silence_from_json(d: Any, now: float | None = None) -> Silence:
    """One saved silence, strictly (Bad names the field that is wrong)."""
    d = st.table(d, "the silence")

    def opt(name: str, limit: int = SUBJECT_MAX) -> str | None:
        v = d.get(name)
        if v is None:
            return None
        v = st.text(v, name)
        if not v or len(v) > limit:
            raise Bad(f"{name} is empty or longer than {limit} characters")
        return v

    sid = st.text(d.get("id"), "id")
    if not sid or len(sid) > 64:
        raise Bad("id is empty or too long")
    host, rule, subject = opt("host", 256), opt("rule", 64), opt("subject")
    if host is None and rule is None and subject is None:
        raise Bad("it names no host, rule or subject")
    if matches_everything(host, rule, subject):
        raise Bad("it matches every alert of the fleet (a subject of only wildcards)")
    starts, ends = st.finite(d.get("starts"), "starts"), st.finite(d.get("ends"), "ends")
    if ends < starts:
        raise Bad("it ends before it starts")
    if now is not None and ends > now + AHEAD_MAX + 86400:
        raise Bad(
            f"it ends {(ends - now) / 86400:.3g} days from now; a silence reaches at most "
            f"{AHEAD_MAX / 86400:g} days ahead"
        )
    if ends - starts > AHEAD_MAX + PAST_MAX + 86400:
        raise Bad("it lasts longer than a silence may")
    comment = st.text(d.get("comment"), "comment")
    by = st.text(d.get("by", ""), "by")
    expired_by = d.get("expired_by")
    if expired_by is not None:
        st.text(expired_by, "expired_by")
    return Silence(
        sid, host, rule, subject, starts, ends, comment[:COMMENT_MAX], by[:256], expired_by
    )


__all__ = [
    "AHEAD_MAX",
    "COMMENT_MAX",
    "PAST_MAX",
    "PATTERN_CHARS",
    "SUBJECT_MAX",
    "Silence",
    "SilenceRefused",
    "matches_everything",
    "silence_from_json",
]
