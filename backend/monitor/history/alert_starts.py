"""When an alert started firing, as the history's events record it: the one computation of
`since`, whatever the monitor's role (`carry_since`).

An alert that starts firing in this engine takes the start of its firing as the history's
events record it, when an observer (a `watch`, a dashboard) recorded it firing, none recorded
it resolved since, and the host's history was written without a gap from then to now. So
`fleetdeck alerts` beside a dashboard that has seen a stray schedule for 9 minutes says 9
minutes too, not "0s ago", watch running or not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.history.store import History, history_path
from fleetdeck.backend.monitor.history.values import sql_text
from fleetdeck.backend.monitor.rules.alerts import Alert, AlertEngine

#: an alert's start in history counts when the host's history has no gap longer than this from
#: then to now: someone observed it all along (a minute's row is written when the next minute
#: starts; rows older than a day are folded into ten-minute rows)
WATCH_GAP_S = 660.0


def open_starts(
    history: History, hosts: set[str], now: float, window: float
) -> dict[tuple[str, str], int]:
    """{(host, "rule subject"): when it started firing} for every alert of `hosts` whose newest
    transition in history is `alert-firing` (none resolved it since) and whose host's history
    was recorded without a gap from then to `now` (`watched`): what an observer said before it
    stopped recording says nothing of what happened after."""
    names = {sql_text(h): h for h in hosts}
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    for e in history.events(now - window):
        if e["kind"] in ("alert-firing", "alert-resolved") and e["host"] in names:
            newest[(e["host"], e["subject"])] = (e["t"], e["kind"])  # oldest first: the last wins
    opened = {k: t for k, (t, kind) in newest.items() if kind == "alert-firing"}
    out: dict[tuple[str, str], int] = {}
    for host in {h for h, _ in opened}:
        first = min(t for (h, _), t in opened.items() if h == host)
        rows = [
            t for t, _, _ in history.series(names[host], "host", first - WATCH_GAP_S).get("", [])
        ]
        out.update({k: t for k, t in opened.items() if k[0] == host and watched(rows, t, now)})
    return out


def watched(rows: list[int], start: float, now: float) -> bool:
    """True when the row times `rows` (oldest first) cover `start` to `now` with no gap longer
    than WATCH_GAP_S: the host was observed all along."""
    prev = start
    for t in rows:
        if t <= prev:
            continue
        if t - prev > WATCH_GAP_S:
            return False
        prev = t
    return now - prev <= WATCH_GAP_S


def carry_since(
    transitions: list[Alert],
    now: float,
    *,
    history: History | None,
    engine: AlertEngine,
    retention_days: float,
    warn: Callable[[str], None],
) -> list[Alert]:
    """`transitions` with each alert that starts firing dated from the start the history
    records for it, in `engine`'s memory too; the rest as they are. Without a `history` the
    state folder's database is read, when there is one (judging never makes a database)."""
    firing = [a for a in transitions if a.state == "firing"]
    if not firing:
        return transitions
    own = False
    if history is None:
        if not history_path().exists():  # judging never makes a database
            return transitions
        history, own = History(retention_days=retention_days), True
    try:
        starts = open_starts(history, {a.host for a in firing}, now, retention_days * 86400)
    except Exception as e:  # history is a help, never a reason not to judge
        warn(
            f"history could not be read for alert starts: {type(e).__name__}: {shown(str(e))[:200]}"
        )
        starts = {}
    finally:
        if own:
            with contextlib.suppress(Exception):
                history.close()
    out = []
    for a in transitions:
        t = (
            starts.get((sql_text(a.host), sql_text(f"{a.rule} {a.subject}")))
            if a.state == "firing"
            else None
        )
        if t is not None and t < a.since:
            a = replace(a, since=float(t))
            if engine.m.firing.get(a.key) is not None:
                engine.m.firing[a.key] = replace(engine.m.firing[a.key], since=a.since)
        out.append(a)
    return out


__all__ = ["WATCH_GAP_S", "carry_since", "open_starts", "watched"]
