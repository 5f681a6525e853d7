"""One entry of the outbox: a transition still to be delivered to one sink, carrying the
`Alert` itself, and its strict reading from the journal's JSON (`outbox.py` keeps the journal;
the JSON is `{"id", "sink", "alert", "created", "attempts", "next_at", "seq"}`, the alert the
contract's alert object with its `title`, and `held` once a silence held it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetdeck.backend.monitor.alert_state import Bad, count, finite, table, text
from fleetdeck.backend.monitor.rules.alerts import Alert

#: the alert fields an entry keeps (strings), and its transition time (any number: the sinks
#: have a rule for a non-finite one)
ALERT_TEXT = ("rule", "host", "subject", "state", "text", "title", "severity")


@dataclass(frozen=True)
class Held:
    """A silence held this entry back: since when, and which silence (said when it goes)."""

    since: float
    silence: str


@dataclass
class Pending:
    """One transition still to be delivered to one sink (`command` or `webhook`): the `Alert`
    as the host sent it (each sink applies its own rule when it sends; the journal's JSON, with
    ensure_ascii, keeps lone surrogates and non-finite numbers through a save)."""

    id: str
    sink: str
    alert: Alert
    created: float
    attempts: int = 0
    next_at: float = 0.0
    #: its place in the journal (0: not journaled)
    seq: int = 0
    #: the silence that held it back, once one did (its text then says so too)
    held: Held | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.id, self.sink)

    def alert_json(self) -> dict[str, Any]:
        """The entry's alert as the journal keeps it: the contract's alert object, its title,
        and `held` once a silence held it."""
        d = self.alert.to_json()
        d["title"] = self.alert.title
        if self.held is not None:
            d["held"] = {"since": self.held.since, "silence": self.held.silence}
        return d

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sink": self.sink,
            "alert": self.alert_json(),
            "created": self.created,
            "attempts": self.attempts,
            "next_at": self.next_at,
        }


def _held(v: Any) -> Held | None:
    if v is None:
        return None
    d = table(v, "alert.held")
    since = d.get("since")
    if isinstance(since, bool) or not isinstance(since, (int, float)):
        raise Bad(f"alert.held.since is not a number ({since!r:.60})")
    return Held(float(since), text(d.get("silence", ""), "alert.held.silence"))


def alert_of_record(d: Any) -> Alert:
    """An entry's alert, strictly: its text fields strings (absent ones empty), its transition
    time any number or null (the sinks have a rule for a non-finite one: null), its severity
    the rule's default when it has none (an entry queued before severities)."""
    alert = table(d, "alert")
    for k in ALERT_TEXT:
        if k in alert and alert[k] is not None:
            text(alert[k], f"alert.{k}")
    since = alert.get("since")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
        raise Bad(f"alert.since is not a number ({since!r:.60})")
    return Alert(
        rule=alert.get("rule") or "",
        host=alert.get("host") or "",
        subject=alert.get("subject") or "",
        state=alert.get("state") or "",
        since=math.nan if since is None else since,
        text=alert.get("text") or "",
        severity=alert.get("severity") or "",
    )


def pending_from_json(d: Any) -> Pending:
    """One saved entry, strictly: Bad names the field that is wrong."""
    d = table(d, "the entry")
    pid = text(d.get("id"), "id")
    sink = text(d.get("sink"), "sink")
    if not pid or len(pid) > 128 or not sink or len(sink) > 64:
        raise Bad("id or sink is empty or too long")
    alert = table(d.get("alert"), "alert")
    return Pending(
        id=pid,
        sink=sink,
        alert=alert_of_record(alert),
        created=finite(d.get("created"), "created"),
        attempts=count(d.get("attempts", 0), "attempts"),
        next_at=finite(d.get("next_at", 0.0), "next_at"),
        seq=count(d.get("seq", 0), "seq"),
        held=_held(alert.get("held")),
    )


__all__ = ["ALERT_TEXT", "Held", "Pending", "alert_of_record", "pending_from_json"]
