"""One delivery for the transitions a sink got together (`[alerts] group_wait`).

When a sink's first new transition is queued, it waits `group_wait` seconds (10 by default, as
Alertmanager's `group_wait` waits before a group's first notification); what that sink gets
meanwhile goes out with it as one delivery listing them, at most `GROUP_MAX` a delivery. Each
transition keeps its own id and its own outbox entry (`outbox.Journal`), so the journal stays
exactly-once per transition: a delivered group's entries are marked done in one append (a crash
leaves all of them queued, or none), and a group cut short by a crash is sent again by the next
start with the same transition ids inside it.

A group of one is the single transition's document, as it always was. A group of more is:

- **webhook body / hook stdin**: `{"id", "group": N, "ids": [...], "rule", "host", "subject",
  "state", "since", "text", "title", "severity", "alerts": [one transition's document each,
  with its own id]}`; `id` (also `Idempotency-Key` and `X-Fleetdeck-Delivery`) is a hash of
  the member ids, so a receiver drops a repeat by it, or by each member's id;
- **the group's fields** (and so the hook's `{placeholders}` and `FLEETDECK_*`): `rule` and
  `host` the members' one value, or their values joined by commas; `subject` the one subject or
  `N subjects`; `state` firing when any member fires; `since` the newest member's; `severity`
  the most urgent; `title` `ALERT 3 alerts on h1, h2: 2 firing, 1 resolved`; `text` each
  member's title and text, `; `-joined (at most `TEXT_LIMIT` characters). `FLEETDECK_IDS` holds
  the member ids, space-separated, and `FLEETDECK_COUNT` how many.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

from fleetdeck.backend.fleet.alert_rules import severity_rank

#: the most transitions one delivery lists
GROUP_MAX = 50
#: a group's text, at most (its members are whole in `alerts`)
TEXT_LIMIT = 4000


def group_id(ids: list[str]) -> str:
    """The id of one delivery of several transitions: the same for the same members."""
    return hashlib.sha256("\0".join(ids).encode()).hexdigest()[:24]


def _joined(values: list[str]) -> str:
    seen = list(dict.fromkeys(values))
    return seen[0] if len(seen) == 1 else ",".join(seen)


class Group:
    """Several transitions as one delivery: the fields every sink reads (as a single alert has
    them), its id, and its members with their ids."""

    def __init__(self, members: list[tuple[Any, str]]) -> None:
        self.members = members
        self.ids = [tid for _, tid in members]
        self.id = group_id(self.ids)
        alerts = [a for a, _ in members]
        firing = [a for a in alerts if a.state == "firing"]
        self.rule = _joined([str(a.rule) for a in alerts])
        self.host = _joined([str(a.host) for a in alerts])
        subjects = list(dict.fromkeys(str(a.subject) for a in alerts))
        self.subject = subjects[0] if len(subjects) == 1 else f"{len(subjects)} subjects"
        self.state = "firing" if firing else "resolved"
        times = [
            a.since
            for a in alerts
            if isinstance(a.since, (int, float))
            and not isinstance(a.since, bool)
            and math.isfinite(a.since)
        ]
        self.since = max(times) if times else None
        pool = firing or alerts
        self.severity = min(
            (str(getattr(a, "severity", "") or "") for a in pool), key=severity_rank
        )
        hosts = list(dict.fromkeys(str(a.host) for a in alerts))
        where = ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")
        counts = ", ".join(
            f"{n} {s}"
            for s, n in (("firing", len(firing)), ("resolved", len(alerts) - len(firing)))
            if n
        )
        self.title = (
            f"{'ALERT' if firing else 'RESOLVED'} {len(alerts)} alerts on {where}: {counts}"
        )
        text, left = [], TEXT_LIMIT
        for i, a in enumerate(alerts):
            line = f"{a.title}: {a.text}"
            if len(line) > left:
                text.append(f"… and {len(alerts) - i} more")
                break
            text.append(line)
            left -= len(line) + 2
        self.text = "; ".join(text)


def group_payload(g: Group, one: Callable[[Any, str], dict[str, Any]]) -> dict[str, Any]:
    """The JSON document of a group (before the JSON rule): its fields and each member's own
    document, made by `one(alert, id)` (`payloads.payload`)."""
    return {
        "id": g.id,
        "group": len(g.members),
        "ids": g.ids,
        "rule": g.rule,
        "host": g.host,
        "subject": g.subject,
        "state": g.state,
        "since": g.since,
        "text": g.text,
        "title": g.title,
        "severity": g.severity,
        "alerts": [one(a, tid) for a, tid in g.members],
    }


__all__ = ["GROUP_MAX", "Group", "TEXT_LIMIT", "group_id", "group_payload"]
