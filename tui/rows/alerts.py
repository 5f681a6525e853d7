"""The Alerts view's rows: an alert's cells (`alert_cells`, silenced or not), a silence's
(`silence_cells`) and the highlighted alert in full (`alert_detail`)."""

from __future__ import annotations

import time

from rich.text import Text

from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import Silence
from fleetdeck.show.fmt import host_text, message_text, severity_text, shown, since_text

STATE_STYLE = {"firing": "bold red", "resolved": "green"}
#: where in an alert's cells (`alert_cells`) its `since` is: the one cell the clock moves
SINCE = 5


def hhmm(t: float) -> str:
    """`14:05` for a time within 20 hours of now, else with its date."""
    return time.strftime(
        "%H:%M" if abs(time.time() - t) < 20 * 3600 else "%Y-%m-%d %H:%M", time.localtime(t)
    )


def alert_cells(a: Alert, silence: Silence | None, now: float) -> tuple:
    """The alerts table's cells of `a`; `silence`: the one holding it, if any; `now`: the
    dashboard's clock (for how long it has fired)."""
    state = (
        Text("silenced", style="yellow")
        if silence
        else Text(a.state, style=STATE_STYLE.get(a.state, ""))
    )
    what = (
        f"silenced by {shown(silence.by)} until {hhmm(silence.ends)}: " if silence else ""
    ) + a.text
    return (
        state,
        severity_text(a.severity if a.state == "firing" else ""),
        a.rule,
        a.host,
        host_text(a.subject),
        since_text(a.since, now),
        message_text(what[:120]),
    )


def silence_cells(s: Silence) -> tuple:
    """The silences table's cells of `s`."""
    return (
        s.id,
        host_text(s.scope),
        hhmm(s.ends),
        host_text(s.by),
        message_text(s.comment[:80]),
    )


def alert_detail(a: Alert, silence: Silence | None) -> Text:
    """Alert `a` in full: its title and since when on one line, its text on the next (at 80x24
    the detail has three lines: what the alert says comes before anything else), and the
    silence holding it."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.since))
    text = message_text(
        f"{a.title} · {a.state} since {when}"
        + (f", {a.severity}" if a.state == "firing" else "")
        + f"\n{a.text}"
    )
    if silence is not None:
        ends = time.strftime("%Y-%m-%d %H:%M", time.localtime(silence.ends))
        text.append_text(
            message_text(
                f"\nSilenced by {shown(silence.by)} until {ends} "
                f"({silence.id}, {silence.scope}): {silence.comment}. No hook hears of it until "
                "then (e ends it now).",
                "yellow",
            )
        )
    return text
