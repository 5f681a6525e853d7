"""The Alerts page (firing alerts by severity with the silence over each, the recently
resolved, the silences in force, the notices a silence holds back) and the Schedules page
(stray first, each with why), drawn from one poll. Host strings pass `pages.esc`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fleetdeck.backend.fleet.schedule_verdict import stray_first, twins_index, why
from fleetdeck.backend.host.lib.units import ago
from fleetdeck.backend.web.pages import clock, esc, nav
from fleetdeck.backend.web.view_state import Seen

#: the most rows one table shows (the rest counted, never silently dropped)
ROWS_MAX = 500


def _table(cls: str, heads: tuple[str, ...], rows: list[str], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{empty}</p>'
    more = (
        f'<p class="more">{len(rows) - ROWS_MAX} more not shown</p>' if len(rows) > ROWS_MAX else ""
    )
    th = "".join(f"<th>{h}</th>" for h in heads)
    return (
        f'<table class="{cls}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows[:ROWS_MAX])}</tbody></table>{more}"
    )


def alerts_body(seen: Seen) -> str:
    """The Alerts page's live part."""
    now = seen.time or time.time()
    firing = [a for a in seen.alerts if a.state == "firing"]
    resolved = [a for a in seen.alerts if a.state != "firing"]
    rows = []
    for a in firing:
        s = seen.silenced.get(a.key)
        hush = f"{esc(s.id)} until {clock(s.ends)}" if s is not None else "-"
        rows.append(
            f'<tr class="alert {esc(a.severity)}"><td><span class="sev {esc(a.severity)}">'
            f"{esc(a.severity)}</span></td><td>{esc(a.rule)}</td><td>{esc(a.host)}</td>"
            f"<td>{esc(a.subject)}</td><td>{ago(max(0.0, now - a.since))}</td>"
            f"<td>{esc(a.text)}</td><td>{hush}</td></tr>"
        )
    out = [
        nav(seen, "alerts"),
        f"<h2>Firing ({len(firing)})</h2>",
        _table(
            "alerts",
            ("severity", "rule", "host", "subject", "for", "what", "silenced"),
            rows,
            "nothing fires",
        ),
        f"<h2>Resolved lately ({len(resolved)})</h2>",
        _table(
            "resolved",
            ("rule", "host", "subject", "resolved", "what"),
            [
                f"<tr><td>{esc(a.rule)}</td><td>{esc(a.host)}</td><td>{esc(a.subject)}</td>"
                f"<td>{clock(a.since)}</td><td>{esc(a.text)}</td></tr>"
                for a in resolved
            ],
            "none",
        ),
        f"<h2>Silences in force ({len(seen.silences)})</h2>",
        _table(
            "silences",
            ("id", "silences", "ends", "by", "why"),
            [
                f"<tr><td>{esc(s.id)}</td><td>{esc(s.scope)}</td><td>{clock(s.ends)}</td>"
                f"<td>{esc(s.by)}</td><td>{esc(s.comment)}</td></tr>"
                for s in seen.silences
            ],
            "none",
        ),
        f"<h2>Notices held by a silence ({len(seen.held)})</h2>",
        _table("held", ("rule", "host", "subject", "held until", "what"), _held(seen.held), "none"),
    ]
    return "".join(out)


def _held(held: tuple[tuple[Mapping[str, Any], float], ...]) -> list[str]:
    return [
        f"<tr><td>{esc(a.get('rule'))}</td><td>{esc(a.get('host'))}</td>"
        f"<td>{esc(a.get('subject'))}</td><td>{clock(until)}</td><td>{esc(a.get('text'))}</td></tr>"
        for a, until in held
    ]


def schedules_body(seen: Seen) -> str:
    """The Schedules page's live part: every schedule in the fleet, what needs action first."""
    every = [s for h in (seen.snap.hosts if seen.snap else ()) for s in h.schedules]
    index = twins_index(every)
    stray = sum(1 for s in every if s.stray)
    rows = [
        f'<tr class="{"stray" if s.stray else "known"}"><td>{esc(s.host)}</td><td>{esc(s.kind)}</td>'
        f"<td>{esc(s.user)}</td><td><code>{esc(s.spec)}</code></td>"
        f"<td><code>{esc(s.command)}</code></td><td>{esc(why(s, every, index))}</td>"
        f"<td>{esc(s.next_run or '-')}</td></tr>"
        for s in stray_first(every)
    ]
    return (
        nav(seen, "schedules")
        + f"<h2>Schedules ({len(every)}, {stray} stray)</h2>"
        + _table(
            "schedules",
            ("host", "kind", "user", "when", "command", "why", "next"),
            rows,
            "no schedule seen",
        )
    )


__all__ = ["ROWS_MAX", "alerts_body", "schedules_body"]
