"""An alert as Alertmanager's v2 API takes it (`POST /api/v2/alerts`), and a saved resolve
checked against that form (the sink is `delivery/sink.py`).

Label values pass through `prom_values.label`, the rule `/metrics` labels follow, so a silence
matches what a scrape shows; annotations are made printable by `sentence`. A firing alert's
`endsAt` is `ENDS_AFTER` ahead, four times `RESEND_S`, the period the sink posts it again at.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.delivery.payloads import json_safe
from fleetdeck.backend.monitor.metrics.values import label

RESEND_S = 60.0
ENDS_AFTER = 4 * RESEND_S
TEXT_MAX = 2048


def stamp(t: float) -> str:
    """A time as Alertmanager's API writes it (RFC 3339, UTC, milliseconds)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sentence(v: Any, limit: int) -> str:
    """`v` as an annotation: printable, at most `limit` characters."""
    # what `shown` escapes, except backslashes and line breaks (a sentence fleetdeck composed
    # already holds its host parts as `shown` wrote them; the dashboard's `said` is this rule)
    text = str(json_safe("" if v is None else v))
    if not text.isprintable():
        text = "".join(ch if ch in "\\\n" else shown(ch) for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def am_alert(a: Any, start: float | None, end: float | None, now: float) -> dict[str, Any]:
    """One alert as Alertmanager's v2 API takes it. `start`: when it started firing (a time
    that is not a finite one in the past is left to Alertmanager); `end`: when it resolved,
    None while it fires."""
    labels = {
        "alertname": label(a.rule),
        "host": label(a.host),
        "subject": label(a.subject),
        "severity": label(getattr(a, "severity", "") or "warning"),
    }
    out: dict[str, Any] = {
        "labels": {k: v for k, v in labels.items() if v},  # an empty value is no label
        "annotations": {
            "summary": sentence(a.title, 1024),
            "description": sentence(a.text, TEXT_MAX),
        },
        "endsAt": stamp(now + ENDS_AFTER if end is None else end),
    }
    if isinstance(start, (int, float)) and math.isfinite(start) and 0 < start <= (end or now):
        out["startsAt"] = stamp(start)
    return out


def saved_key(d: Any) -> str | None:
    """The alert key of a saved resolve, or None when it is not one `am_alert` wrote."""
    if not isinstance(d, dict) or set(d) - {"labels", "annotations", "startsAt", "endsAt"}:
        return None
    labels, notes = d.get("labels"), d.get("annotations")
    for table in (labels, notes):
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= 4 * TEXT_MAX
            for k, v in table.items()
        ):
            return None
    if not all(
        isinstance(d.get(k, ""), str) and len(d.get(k, "")) <= 40 for k in ("startsAt", "endsAt")
    ):
        return None
    if (
        not isinstance(labels, dict)
        or "alertname" not in labels
        or "host" not in labels
        or "endsAt" not in d
    ):
        return None
    return f"{labels['alertname']}|{labels['host']}|{labels.get('subject', '')}"


__all__ = ["ENDS_AFTER", "RESEND_S", "TEXT_MAX", "am_alert", "saved_key", "sentence", "stamp"]
