"""The fleet file's `[alerts]` table: the rules by name, their `for` durations and thresholds,
parsed as strictly as the rest of the file (`config.load_fleet` reads it; the monitor judges
with it, `backend/monitor/rules/alerts.py`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any, Protocol

from fleetdeck.backend.fleet.bounds import (
    DAY,
    WEEK,
    Bounds,
    control_problem,
    number_problem,
    toml_shown,
)
from fleetdeck.backend.fleet.errors import ConfigError

RULES = (
    "host-down",
    "run-stalled",
    "loss-nonfinite",
    "loss-spike",
    "overfitting",
    "disk-full-eta",
    "gpu-headroom",
    "idle-holder",
    "new-stray",
    "stray-returned",
    "seat-check",
    "seat-restart",
    "gpu-throttled",
    "gpu-hot",
    "gpu-ecc",
    "gpu-xid",
    "gpu-lost",
    "run-finished",
    "run-failed",
)
#: seconds a rule's condition must hold before it fires. disk-full-eta waits ten minutes: an
#: ETA taken from one burst of writes said "fills in about 10.8 h" for a disk that never filled.
#: The others already carry a duration of their own (host_down_after, idle_holder_minutes, the
#: probe's stall factor) or are events and verdicts that are not seen twice (an eval that rose
#: twice, a failed check, a restart), so they fire on the poll that sees them.
FOR_DEFAULTS = {rule: 0.0 for rule in RULES}
FOR_DEFAULTS["disk-full-eta"] = 600.0
#: a slowdown or a hot card for a few seconds is a burst of load; a minute of it is the card's state
FOR_DEFAULTS["gpu-throttled"] = 60.0
FOR_DEFAULTS["gpu-hot"] = 60.0
#: how urgent an alert is, most urgent first: the Alerts view and `fleetdeck alerts` list firing
#: alerts in this order, and the dashboard toasts only critical ones
SEVERITIES = ("critical", "warning", "info")
#: each rule's severity (`severity = {rule = "..."}` in `[alerts]` changes it): critical when
#: something is lost or about to be (a host, a run, a seat's answers, the disk, a card),
#: warning when it needs a look soon, info when it is news. new-stray is info, and warning for
#: a schedule naming a path that does not exist (`alerts.AlertEngine`)
#: one-shot notices: an event, not a condition. A silence never drops one: it is held, marked,
#: and delivered when the silence ends, whatever its resolve did meanwhile
NOTICES = ("run-finished", "run-failed")

SEVERITY_DEFAULTS = {
    "host-down": "critical",
    "loss-nonfinite": "critical",
    "seat-check": "critical",
    "disk-full-eta": "critical",
    "run-failed": "critical",
    "gpu-ecc": "critical",
    "gpu-xid": "critical",
    "gpu-lost": "critical",
    "run-stalled": "warning",
    "overfitting": "warning",
    "loss-spike": "warning",
    "gpu-headroom": "warning",
    "idle-holder": "warning",
    "seat-restart": "warning",
    "gpu-throttled": "warning",
    "gpu-hot": "warning",
    "new-stray": "info",
    "stray-returned": "warning",
    "run-finished": "info",
}


class Hold(Protocol):
    """How a rule says its condition is true now (`AlertEngine.evaluate`'s `hold`): the rule, the
    host, the subject (a run's path, a card, a seat...), since when, the alert's text, and a
    severity other than the rule's own when it has one."""

    def __call__(
        self,
        rule: str,
        host: str,
        subject: str,
        since: float,
        text: str,
        severity: str | None = None,
    ) -> None: ...


def severity_rank(severity: str) -> int:
    """0 for critical, 1 for warning, 2 for info (anything else after them)."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


@dataclass(frozen=True)
class AlertConfig:
    """The `[alerts]` table of the fleet file, every key optional."""

    #: seconds a host must stay unreachable before host-down fires
    host_down_after: float = 120.0
    #: loss-spike: the last loss above this many times the median of the previous ones
    loss_spike_factor: float = 3.0
    #: disk-full-eta fires when the disk fills in fewer hours than this at the current rate
    disk_full_hours: float = 24.0
    #: seconds of disk history the rate is taken over, and the least span it needs
    disk_rate_window: float = 1800.0
    disk_rate_min_span: float = 300.0
    #: gpu-headroom fires when a card with a seat has less free than this (GiB)
    gpu_headroom_floor_gib: float = 6.0
    #: gpu-hot fires when a card is within this many degrees C of its slowdown threshold
    gpu_hot_margin_c: float = 5.0
    #: idle-holder: more than this much GPU memory (GiB) on a card at or below idle_util_pct
    idle_holder_gib: float = 1.0
    idle_holder_minutes: float = 30.0
    idle_util_pct: float = 1.0
    #: how long a seat restart event stays firing before it resolves (minutes)
    event_hold_minutes: float = 15.0
    #: `watch` checks every seat this often (seconds); 0 turns periodic checks off
    seat_check_interval: float = 0.0
    #: history older than this is dropped (days)
    history_retention_days: float = 14.0
    #: rules not to judge at all
    disabled: tuple[str, ...] = ()
    #: a command run once per transition, argv with {title} {text} {rule} {host} {subject}
    #: {state} {since} replaced in each argument (no shell)
    on_alert: tuple[str, ...] | None = None
    #: a URL that receives each transition as JSON (POST)
    webhook: str | None = None
    webhook_timeout: float = 5.0
    #: seconds a sink's first new transition waits for others, so that what happens together
    #: (a host's runs failing at once) goes out as one delivery listing them, as Alertmanager's
    #: `group_wait` does; 0 sends each transition on its own at once (`deliver.Deliverer`)
    group_wait: float = 10.0
    #: Alertmanager base URLs (`backend/monitor/alertmanager/sink.py`): `watch` posts every firing
    #: alert to each one's v2 API, again while it fires, and its end when it resolves
    alertmanager: tuple[str, ...] = ()
    #: `for = {rule = seconds}`: how long a rule's condition must hold before it fires, for
    #: the rules named (the others keep FOR_DEFAULTS)
    for_: tuple[tuple[str, float], ...] = ()
    #: `severity = {rule = "critical" | "warning" | "info"}`: the rules named get that severity
    #: (the others keep SEVERITY_DEFAULTS)
    severity: tuple[tuple[str, str], ...] = ()

    def severity_set(self, rule: str) -> str | None:
        """The severity the fleet file gives `rule`, or None."""
        return dict(self.severity).get(rule)

    def severity_of(self, rule: str) -> str:
        """`rule`'s severity: the fleet file's, else its default."""
        return self.severity_set(rule) or SEVERITY_DEFAULTS.get(rule, "warning")

    def for_seconds(self, rule: str) -> float:
        """How long `rule`'s condition must hold before it fires."""
        return dict(self.for_).get(rule, FOR_DEFAULTS.get(rule, 0.0))


#: every number key of `[alerts]` and its range (docs/fleet-file.md, in one table with the host
#: keys' `config.FLEET_NUMBERS`): durations from the least that means something to the most that
#: does not mean "never", in the unit the key's name says
ALERT_NUMBERS: dict[str, Bounds] = {
    "host_down_after": Bounds(1, WEEK),  # s
    "loss_spike_factor": Bounds(1, 1e6, above=True),  # times the median
    "disk_full_hours": Bounds(0.1, 24 * 365),  # h: up to a year ahead
    "disk_rate_window": Bounds(60, WEEK),  # s
    "disk_rate_min_span": Bounds(1, DAY),  # s, at most disk_rate_window
    "gpu_headroom_floor_gib": Bounds(0, 4096),  # GiB
    "idle_holder_gib": Bounds(0, 4096, above=True),  # GiB
    "idle_holder_minutes": Bounds(1, WEEK // 60),  # min
    "idle_util_pct": Bounds(0, 100),  # %
    "gpu_hot_margin_c": Bounds(0, 100),  # degrees C below the slowdown threshold
    "event_hold_minutes": Bounds(1, WEEK // 60),  # min
    "seat_check_interval": Bounds(1, DAY, zero="off"),  # s
    "history_retention_days": Bounds(1, 3650),  # days
    "webhook_timeout": Bounds(0.1, 300),  # s for one delivery
    "group_wait": Bounds(
        1, 600, zero="off"
    ),  # s; past ten minutes it delays pages, not groups them
}
#: `for = {rule = seconds}`: 0 (fire on the poll that sees it) up to a week
FOR_BOUNDS = Bounds(0, WEEK)


def parse_alerts(table: Any, source: str) -> AlertConfig:
    """The `[alerts]` table, strictly: unknown keys, wrong types and bad values are ConfigError."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: 'alerts' must be a table")
    values: dict[str, Any] = {}
    known = {f.name for f in fields(AlertConfig)}
    for k, v in table.items():
        where = f"{source}: [alerts]: key {k!r}"
        if k == "for":
            values["for_"] = _parse_for(v, where)
            continue
        if k == "severity":
            values[k] = _parse_severity(v, where)
            continue
        if k not in known or k == "for_":
            raise ConfigError(f"{source}: [alerts]: unknown key {k!r}")
        if k in ALERT_NUMBERS:
            problem = number_problem(k, v, ALERT_NUMBERS[k])
            if problem:
                raise ConfigError(f"{source}: [alerts]: {problem}")
            values[k] = float(v)
        elif k in ("disabled", "on_alert"):
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise ConfigError(f"{where} must be a list of strings")
            if k == "disabled" and (bad := [x for x in v if x not in RULES]):
                raise ConfigError(f"{where}: unknown rule {bad[0]!r} (rules: {', '.join(RULES)})")
            if k == "on_alert" and not v:
                raise ConfigError(f"{where} must name a command")
            values[k] = tuple(v)
        elif k == "webhook":
            if isinstance(v, str) and (problem := control_problem(k, v)):
                raise ConfigError(f"{source}: [alerts]: {problem}")
            if not isinstance(v, str) or not re.match(r"^https?://[^\s]+$", v):
                raise ConfigError(f"{where} must be an http:// or https:// URL")
            values[k] = v
        elif k == "alertmanager":
            values[k] = _parse_alertmanager(v, where, source)
    window = values.get("disk_rate_window", AlertConfig.disk_rate_window)
    span = values.get("disk_rate_min_span", AlertConfig.disk_rate_min_span)
    if span > window:  # the samples could never span more than the window they are taken from
        if "disk_rate_min_span" in values:
            raise ConfigError(
                f"{source}: [alerts]: disk_rate_min_span = {span:g} is out of range: key "
                f"'disk_rate_min_span' must be at most disk_rate_window ({window:g}"
                f"{'' if 'disk_rate_window' in values else ', its default'})"
            )
        raise ConfigError(
            f"{source}: [alerts]: disk_rate_window = {window:g} is out of range: key "
            f"'disk_rate_window' must be at least disk_rate_min_span ({span:g}, its default)"
        )
    return AlertConfig(**values)


#: at most this many Alertmanagers (an HA cluster is three or so; each gets every alert)
ALERTMANAGER_MAX = 8


def _parse_alertmanager(v: Any, where: str, source: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or len(v) > ALERTMANAGER_MAX:
        raise ConfigError(
            f"{where} must be a list of 1 to {ALERTMANAGER_MAX} http:// or https:// URLs"
        )
    for url in v:
        if isinstance(url, str) and (problem := control_problem("alertmanager", url)):
            raise ConfigError(f"{source}: [alerts]: {problem}")
        if (
            not isinstance(url, str)
            or len(url) > 2048
            or not re.match(r"^https?://[^\s/?#]+(/[^\s?#]*)?$", url)
        ):
            raise ConfigError(
                f"{where}: {toml_shown(url)} is not an http:// or https:// URL "
                "(scheme, host, optional port and path; no query)"
            )
    urls = [u.rstrip("/") for u in v]
    if len(set(urls)) != len(urls):
        raise ConfigError(
            f"{where}: {toml_shown(next(u for u in urls if urls.count(u) > 1))} is named twice"
        )
    return tuple(urls)


def _parse_for(v: Any, where: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(v, dict):
        raise ConfigError(f"{where} must be a table of rule = seconds")
    out = []
    for rule, secs in v.items():
        if rule not in RULES:
            raise ConfigError(f"{where}: unknown rule {rule!r} (rules: {', '.join(RULES)})")
        if (
            isinstance(secs, bool)
            or not isinstance(secs, (int, float))
            or not math.isfinite(secs)
            or not FOR_BOUNDS.takes(secs)
        ):
            raise ConfigError(
                f"{where}: {rule} must be a number of seconds, 0 or more and at most "
                f"{WEEK} (a week), not {toml_shown(secs)}"
            )
        out.append((rule, float(secs)))
    return tuple(sorted(out))


def _parse_severity(v: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, dict):
        raise ConfigError(f"{where} must be a table of rule = severity")
    out = []
    for rule, sev in v.items():
        if rule not in RULES:
            raise ConfigError(f"{where}: unknown rule {rule!r} (rules: {', '.join(RULES)})")
        if sev not in SEVERITIES:
            raise ConfigError(
                f"{where}: {rule} must be one of {', '.join(SEVERITIES)}, not {toml_shown(sev)}"
            )
        out.append((rule, sev))
    return tuple(sorted(out))
