"""One card's incident on one time axis: a figure of the card over a window, with what happened
on its host in that window, read from the poll history and the audit log.

The figure is one of the card's recorded series (`FIGURES`: memory used and utilisation, kind
`gpu`; temperature and power, kind `gpuh`), as `width` cells of the window folded as the
history folds them (memory and temperature by their peak, utilisation and power by their mean:
`history_figures.FIGURES`). The events are:

- the alert transitions the history recorded for the host (`alert-firing`), of the host's own
  rules (a seat restarting or OOM-killed, a run failing, finishing or stalling, the host down)
  and of this card's (`GPU<n>` subjects: Xid errors, throttling, heat, ECC, headroom);
- seat checks that failed (`seat-check` events);
- the audit log's records for the host (purges, mirrors, launches, stops), by `ts`;
- runs starting: a run's series (recorded while it runs) that begins inside the window;
- the cells in which the host answered none of its polls (`down`): a gap in the figure is the
  host not answering, not the card at zero.

What a host said is text from the host: it is shown through `shown` by whoever draws it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.history.figures import Line

#: figure -> (history kind, which of its two figures)
FIGURES = {
    "memory": ("gpu", 0),
    "utilisation": ("gpu", 1),
    "temperature": ("gpuh", 0),
    "power": ("gpuh", 1),
}
#: the rules whose firing is an event of every card on the host
HOST_RULES = {
    "seat-restart": "seat restart",
    "run-failed": "run failed",
    "run-finished": "run finished",
    "run-stalled": "run stalled",
    "host-down": "host down",
    "loss-nonfinite": "loss not finite",
}
#: the rules whose firing is an event of the card its subject names (`GPU<n>`, `GPU<n> Xid <code>`)
GPU_RULES = {
    "gpu-xid": "Xid",
    "gpu-throttled": "throttled",
    "gpu-hot": "hot",
    "gpu-ecc": "ECC",
    "gpu-headroom": "headroom",
    "gpu-lost": "lost",
}
#: the audit log's actions shown, by the word they are shown with
AUDIT_ACTIONS = {
    "purge": "purge",
    "mirror": "mirror",
    "launch": "launch",
    "stop": "stop",
    "remove": "remove",
}


@dataclass(frozen=True)
class Event:
    """One thing that happened: when (epoch seconds), a short label, and its text (as the host or
    the log gave it, unless `escaped`: then already through `shown`). An action from the audit
    log carries its `record` too: the text is its result word, and whoever draws the event adds
    the record's summary (`show/audit_text.py`: the Audit view's own line)."""

    t: float
    label: str
    text: str
    escaped: bool = False
    record: Mapping[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Incident:
    """A card's figure over a window, cell by cell, and the events of the window, oldest first."""

    host: str
    gpu: int  # the card, or -1 for a seat's incident
    series: str  # the history's series name: "<index>:<uuid>", or a seat's "<host>:<port>:<kind>"
    figure: str
    since: float
    until: float
    step: int  # seconds a cell
    line: Line | None  # None: nothing recorded of this figure in the window
    columns: int = 1  # cells across the window
    events: tuple[Event, ...] = ()
    down: tuple[int, ...] = field(default_factory=tuple)  # cells where the host answered no poll

    @property
    def width(self) -> int:
        return len(self.line.cells) if self.line else self.columns


def _card_subject(subject: str, gpu: int) -> bool:
    head = subject.split(" ", 1)[0]
    return head == f"GPU{gpu}"


def _alert_event(e: dict[str, Any], gpu: int) -> Event | None:
    """The event `e` of history shows on card `gpu`'s plot, or None. A seat check is its own
    event, sound or not; the seat-check alert that a failed one fires is not listed again."""
    if e.get("kind") == "seat-check":
        return Event(float(e["t"]), "seat check", f"{e.get('subject', '')}: {e.get('text', '')}")
    if e.get("kind") != "alert-firing":
        return None
    rule, _, subject = str(e.get("subject", "")).partition(" ")
    if rule in HOST_RULES:
        return Event(float(e["t"]), HOST_RULES[rule], str(e.get("text", "")))
    if rule in GPU_RULES and _card_subject(subject, gpu):
        label = GPU_RULES[rule]
        if rule == "gpu-xid":
            label = subject.split(" ", 1)[1] if " " in subject else label  # "Xid 79"
        return Event(float(e["t"]), label, str(e.get("text", "")))
    return None


def _audit_event(r: dict[str, Any], host: str, since: float, until: float) -> Event | None:
    t = r.get("ts")
    if (
        r.get("host") != host
        or not isinstance(t, (int, float))
        or not math.isfinite(t)
        or not since <= t <= until
    ):
        return None
    action = str(r.get("action", ""))
    if action not in AUDIT_ACTIONS:
        return None
    return Event(
        float(t), AUDIT_ACTIONS[action], shown(str(r.get("result", ""))), escaped=True, record=r
    )


def _newest(series: dict[str, tuple[Line | None, Line | None]]) -> str:
    """Of several series (a card replaced under the same index, a seat redeployed), the one
    recorded last."""
    return max(series, key=lambda n: max((x.last_t for x in series[n] if x is not None), default=0))


def incident(
    hist: Any,
    host: str,
    gpu: int,
    figure: str,
    since: float,
    until: float,
    width: int,
    audit: list[dict[str, Any]] = (),  # type: ignore[assignment]
    seat: str | None = None,
) -> Incident | None:
    """The incident of card `gpu` of `host` from `since` to `until` in `width` cells, or None
    when the history has no such card in the window. `audit`: the audit log's records
    (`actions.audit.read_audit()`), filtered here by host and window. With `seat` (its port, or
    its `host:port:kind` key), the seat's own memory instead of a card's figure."""
    kind, which = ("seat", 1) if seat is not None else FIGURES[figure]
    step = max(60, int((until - since) // max(1, width)) or 60)
    data = hist.chart(host, since, step, width)
    if seat is not None:
        found = {
            n: pair
            for n, pair in data.get("seat", {}).items()
            if seat in (n, (n.rsplit(":", 2) + [""])[1])
        }
        if not found:
            return None
        name, gpu, figure = _newest(found), -1, "memory"
    else:
        cards = {
            n: pair for n, pair in data.get("gpu", {}).items() if n.partition(":")[0] == str(gpu)
        }
        if not cards:
            return None
        name = _newest(cards)
    pair = data.get(kind, {}).get(name)
    line = pair[which] if pair else None
    events = [
        ev
        for ev in (
            _alert_event(e, gpu)
            for e in hist.events(since)
            if e.get("host") == host and since <= e.get("t", 0) <= until
        )
        if ev
    ]
    events += [
        ev
        for ev in (_audit_event(r, host, since, until) for r in audit if isinstance(r, dict))
        if ev
    ]
    # a run is recorded while it runs: a series that begins inside the window is a run starting
    for path, pair in data.get("run", {}).items():
        first = min((x.first_t for x in pair if x is not None), default=None)
        if first is not None and first >= since + step:
            events.append(Event(float(first), "run started", path))
    answered = data.get("host", {}).get("", (None, None))[0]
    down = (
        tuple(i for i, v in enumerate(answered.cells) if v is not None and v == 0)
        if answered
        else ()
    )
    return Incident(
        host=host,
        gpu=gpu,
        series=name,
        figure=figure,
        since=since,
        until=until,
        step=step,
        line=line,
        columns=max(1, int(width)),
        events=tuple(sorted(events, key=lambda ev: ev.t)),
        down=down,
    )


__all__ = ["AUDIT_ACTIONS", "FIGURES", "GPU_RULES", "HOST_RULES", "Event", "Incident", "incident"]
