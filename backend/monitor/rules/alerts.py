"""Alerts: rules judged on every poll, each alert firing once and resolving once.

`AlertEngine.evaluate(snapshot)` returns the transitions of that poll (an alert that started
firing, or one that resolved); a condition that holds on the next poll changes nothing, so a
hook fires once per transition and never storms. A host that cannot be asked keeps its other
alerts as they were: not seeing a stalled run is not the run recovering.

Rules (`RULES`): host-down (longer than `host_down_after`), run-stalled, loss-nonfinite,
loss-spike, overfitting (eval loss rose at two consecutive evals), disk-full-eta (at the rate
seen over `disk_rate_window`, from history), gpu-headroom (a card holding a seat with less
free than the floor), idle-holder (a process that is neither a seat nor a run holding more
than `idle_holder_gib` on a card idle for `idle_holder_minutes`), new-stray (a stray schedule),
seat-check (the last check of a seat failed), seat-restart (restart count grew or OOMKilled).
Each rule is judged in a module of its kind: run-stalled, loss-nonfinite, loss-spike and
overfitting in `training.py`; disk-full-eta in `disk.py`; gpu-headroom, idle-holder,
seat-restart and seat-check in `seats.py`; the GPU health rules (gpu-throttled, gpu-hot,
gpu-ecc, gpu-xid) in `gpu.py`; new-stray and the first look at a host (one alert for all
the stray schedules it holds then) in `strays.py`; run-finished and run-failed (a run's
end, seen live) in `runs.py`. Host-down is judged here.
Thresholds come from the fleet file's `[alerts]` table, validated as strictly as the rest.

Each rule has a `for` duration, as a Prometheus alerting rule does: its condition must hold on
every poll for that long before the alert fires (a condition that lapses starts over), so a
flap does not page. `FOR_DEFAULTS` gives them; `for = {rule = seconds}` in `[alerts]` changes them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleetdeck.backend.fleet.alert_rules import (
    FOR_DEFAULTS,
    RULES,
    SEVERITIES,
    SEVERITY_DEFAULTS,
    AlertConfig,
    parse_alerts,
    severity_rank,
)
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.host.lib import units
from fleetdeck.backend.monitor import alert_state as st
from fleetdeck.backend.monitor.alert_state import Bad, Reject
from fleetdeck.backend.monitor.rules.disk import add_disk_sample, disk_eta, judge_disks
from fleetdeck.backend.monitor.rules.ends import subject_gone
from fleetdeck.backend.monitor.rules.gpu import judge_gpus
from fleetdeck.backend.monitor.rules.runs import judge_runs, keys_by_host
from fleetdeck.backend.monitor.rules.seats import (
    checks_by_host,
    holders_by_host,
    judge_holders,
    judge_seats,
)
from fleetdeck.backend.monitor.rules.strays import judge_strays
from fleetdeck.backend.monitor.rules.training import judge_training

KEEP_RESOLVED = 100
#: a stray loop must be seen this long before new-stray fires for it, whatever `for` says: a
#: shell that loops for a few seconds (a script's `for` over files) is not a stray schedule
#: (a loop naming a missing path, `dead-target`, fires at once)
LOOP_SETTLE_S = 60.0


@dataclass(frozen=True)
class Alert:
    """One alert: what, where, firing or resolved, since when, and one sentence."""

    rule: str
    host: str
    subject: str
    state: str
    since: float
    text: str
    #: critical, warning or info (`alert_rules.SEVERITY_DEFAULTS`, `severity` in `[alerts]`;
    #: left out, the rule's default)
    severity: str = ""

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", SEVERITY_DEFAULTS.get(self.rule, "warning"))

    @property
    def key(self) -> str:
        return f"{self.rule}|{self.host}|{self.subject}"

    @property
    def title(self) -> str:
        word = "RESOLVED" if self.state == "resolved" else "ALERT"
        return f"{word} {self.rule} on {self.host}: {self.subject}"

    def to_json(self) -> dict[str, Any]:
        """The contract's alert object."""
        return {
            "rule": self.rule,
            "host": self.host,
            "subject": self.subject,
            "state": self.state,
            "since": self.since,
            "text": self.text,
            "severity": self.severity,
        }


def alert_from_json(d: Any) -> Alert:
    """A saved alert, strictly (Bad names the field that is wrong)."""
    d = st.table(d, "the alert")
    rule = st.text(d.get("rule"), "rule")
    sev = d.get("severity")
    return Alert(
        rule=rule,
        host=st.text(d.get("host"), "host"),
        subject=st.text(d.get("subject"), "subject"),
        state=st.text(d.get("state"), "state"),
        since=st.finite(d.get("since"), "since"),
        text=st.text(d.get("text", ""), "text"),
        severity=sev if sev in SEVERITIES else SEVERITY_DEFAULTS.get(rule, "warning"),
    )


@dataclass
class _Memory:
    """What the engine remembers between polls (saved with `to_state`)."""

    firing: dict[str, Alert] = field(default_factory=dict)
    resolved: deque = field(default_factory=lambda: deque(maxlen=KEEP_RESOLVED))
    #: why a firing alert's subject ended (a seat gone), by alert key, for its resolve's text
    ended: dict = field(default_factory=dict)
    down_since: dict[str, float] = field(default_factory=dict)
    idle_since: dict[str, float] = field(default_factory=dict)
    restarts: dict[str, tuple[int | None, bool]] = field(default_factory=dict)
    events: dict[str, tuple[float, str]] = field(default_factory=dict)
    disk: dict[str, deque] = field(default_factory=dict)
    #: alert key -> when its condition was first seen holding, while it waits out its `for`
    pending: dict[str, float] = field(default_factory=dict)
    #: hosts looked at (answered) before, and the stray schedule ids each one's first look
    #: folded into one alert (`strays.py`)
    looked: set = field(default_factory=set)
    first_look: dict[str, list[str]] = field(default_factory=dict)
    #: "host|run path" -> the run's state at the last poll, and run-finished / run-failed
    #: events by alert key -> (time, text) (`runs.py`)
    runs: dict[str, str] = field(default_factory=dict)
    run_events: dict[str, tuple[float, str]] = field(default_factory=dict)


class AlertEngine:
    """Judges every rule on each poll and remembers what fires (see the module docstring)."""

    def __init__(self, config: AlertConfig | None = None) -> None:
        self.config = config or AlertConfig()
        self.m = _Memory()
        #: per alert key, a wait longer than its rule's `for` (this poll's loops)
        self._settle: dict[str, float] = {}

    # -- what it knows ---------------------------------------------------------------------
    def firing(self) -> list[Alert]:
        """Alerts firing now, oldest first."""
        return sorted(self.m.firing.values(), key=lambda a: a.since)

    def alerts(self) -> list[Alert]:
        """Firing alerts by severity (critical first), then newest first; then the recently
        resolved ones, newest first."""
        return by_severity(self.m.firing.values()) + sorted(self.m.resolved, key=lambda a: -a.since)

    def add_disk_sample(self, host: str, path: str, t: float, used: int, free: int) -> None:
        """Feed one disk sample (history preloads the window this way)."""
        add_disk_sample(self.m, host, path, t, used, free)

    def disk_eta(self, host: str, path: str) -> float | None:
        """Seconds until the disk behind `path` is full at the rate over the window, or None
        (`disk_alerts.disk_eta`)."""
        return disk_eta(self.m, self.config, host, path)

    # -- one poll ----------------------------------------------------------------------------
    def evaluate(
        self, snap: FleetSnapshot, checks: Mapping[str, Any] | None = None, now: float | None = None
    ) -> list[Alert]:
        """Judge every rule on `snap`; the transitions (fired or resolved) of this poll.
        `checks` maps a seat key (`host:port:kind`) to its last `SeatCheck`."""
        now = (snap.time or time.time()) if now is None else now
        conds: dict[str, tuple[str, str, str, float, str, str]] = {}
        self._settle = {}
        blind: set[str] = set()
        off = set(self.config.disabled)

        def hold(
            rule: str, host: str, subject: str, since: float, text: str, severity: str | None = None
        ) -> None:
            if rule not in off:
                conds[f"{rule}|{host}|{subject}"] = (
                    rule,
                    host,
                    subject,
                    since,
                    text,
                    severity or self.config.severity_of(rule),
                )

        checks = checks or {}
        # each host's keys and seat checks, found in one pass a poll (not one pass a host)
        run_keys, holders = keys_by_host(self.m), holders_by_host(self.m)
        own, checked = checks_by_host(checks), {c.port for c in checks.values() if c is not None}
        for h in snap.hosts:
            if not h.reachable:
                blind.add(h.name)
                since = self.m.down_since.setdefault(h.name, h.time or now)
                if now - since >= self.config.host_down_after:
                    hold(
                        "host-down",
                        h.name,
                        h.name,
                        since,
                        f"{h.name} has not answered for {units.ago(now - since)}: {h.error}",
                    )
                continue
            self.m.down_since.pop(h.name, None)
            judge_training(h, hold, self.config)
            judge_runs(self.m, self.config, h, now, hold, run_keys.get(h.name, ([], [])))
            judge_disks(self.m, self.config, h, now, hold)
            judge_holders(self.m, self.config, h, now, hold, holders.get(h.name, []))
            judge_gpus(h, now, hold, self.config)
            judge_seats(self.m, self.config, h, now, checks, hold, own.get(h.name, {}), checked)
            judge_strays(self.m, self.config, h, now, hold, self._settle, LOOP_SETTLE_S)
        out = self._transitions(conds, blind, now, snap)
        self.m.ended.clear()  # only this poll's: a subject that ends is said at its resolve
        return out

    def _transitions(
        self, conds: dict, blind: set[str], now: float, snap: FleetSnapshot
    ) -> list[Alert]:
        out = []
        for key, (rule, host, subject, since, words, severity) in conds.items():
            cur = self.m.firing.get(key)
            if cur is None:
                held = now - self.m.pending.setdefault(key, now)
                if held < max(self.config.for_seconds(rule), self._settle.get(key, 0.0)):
                    continue  # not for long enough yet
                self.m.pending.pop(key, None)
                a = Alert(rule, host, subject, "firing", since, words, severity)
                self.m.firing[key] = a
                out.append(a)
            elif cur.text != words or cur.severity != severity:
                # new figures (or a severity the fleet file changed), not a new alert
                self.m.firing[key] = replace(cur, text=words, severity=severity)
        for key in [k for k in self.m.pending if k not in conds]:
            if key.split("|", 2)[1] not in blind:  # lapsed: it starts over if it comes back
                del self.m.pending[key]
        for key, a in list(self.m.firing.items()):
            if key in conds or (a.host in blind and a.rule != "host-down"):
                continue
            del self.m.firing[key]
            # a subject that is gone says so (alert_ends.py): a resolve never reads as the trouble
            gone = self.m.ended.pop(key, None) or subject_gone(a, snap, now)
            r = replace(a, state="resolved", since=now, text=gone or a.text)
            self.m.resolved.append(r)
            out.append(r)
        return out

    # -- saving ------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """What `from_state` needs to carry on after a restart (JSON-able)."""
        return {
            "firing": [a.to_json() for a in self.m.firing.values()],
            "resolved": [a.to_json() for a in self.m.resolved],
            "down_since": self.m.down_since,
            "idle_since": self.m.idle_since,
            "restarts": {k: list(v) for k, v in self.m.restarts.items()},
            "events": {k: list(v) for k, v in self.m.events.items()},
            "pending": self.m.pending,
            "looked": sorted(self.m.looked),
            "first_look": self.m.first_look,
            "runs": self.m.runs,
            "run_events": {k: list(v) for k, v in self.m.run_events.items()},
        }

    def load_state(self, d: Any) -> list[Reject]:
        """Carry on from `to_state()`'s output, strictly per entry: an entry that does not hold
        what it must (a wrong type, a non-finite time) is left out and returned, the others load."""
        self.m = m = _Memory()
        rejects: list[Reject] = []
        if not isinstance(d, dict):
            return [Reject("the state", f"is not an object ({type(d).__name__})", d)] if d else []

        def each(name: str, kind: type, load: Callable[[Any, Any], object]) -> None:
            v = d.get(name)
            if v is None:
                return
            if not isinstance(v, kind):
                rejects.append(
                    Reject(name, f"is not a{'n object' if kind is dict else ' list'}", v)
                )
                return
            for k, x in (
                v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
            ):
                try:
                    load(k, x)
                except Bad as e:
                    rejects.append(
                        Reject(
                            f"{name}[{k!r}]" if kind is dict else f"{name}[{k}]",
                            str(e),
                            {k: x} if kind is dict else x,
                        )
                    )

        def alert(_k: object, x: Any) -> Alert:
            return alert_from_json(x)

        each("firing", list, lambda k, x: m.firing.__setitem__((a := alert(k, x)).key, a))
        each("resolved", list, lambda k, x: m.resolved.append(alert(k, x)))
        each(
            "down_since",
            dict,
            lambda k, x: m.down_since.__setitem__(str(k), st.finite(x, "the time")),
        )
        each(
            "idle_since",
            dict,
            lambda k, x: m.idle_since.__setitem__(str(k), st.finite(x, "the time")),
        )
        each("pending", dict, lambda k, x: m.pending.__setitem__(str(k), st.finite(x, "the time")))

        def restart(k: object, x: Any) -> None:
            x = st.items(x, "the entry")
            if (
                len(x) != 2
                or not isinstance(x[1], bool)
                or (x[0] is not None and st.count(x[0], "the count") < 0)
            ):
                raise Bad("is not [restart count or null, OOM-killed]")
            m.restarts[str(k)] = (x[0], x[1])

        def event(k: object, x: Any) -> None:
            x = st.items(x, "the entry")
            if len(x) != 2:
                raise Bad("is not [time, text]")
            m.events[str(k)] = (st.finite(x[0], "the time"), st.text(x[1], "the text"))

        each("restarts", dict, restart)
        each("events", dict, event)

        def run_event(k: object, x: Any) -> None:
            if (
                str(k).split("|", 1)[0] not in ("run-finished", "run-failed")
                or str(k).count("|") < 2
            ):
                raise Bad("is not a run-finished or run-failed alert key")
            event(k, x)
            m.run_events[str(k)] = m.events.pop(str(k))

        def first_look(k: object, x: Any) -> None:
            ids = st.items(x, "the entry")
            m.first_look[str(k)] = [st.text(i, "a schedule id") for i in ids]

        each("looked", list, lambda _k, x: m.looked.add(st.text(x, "the host")))
        each("first_look", dict, first_look)
        each("runs", dict, lambda k, x: m.runs.__setitem__(str(k), st.text(x, "the state")))
        each("run_events", dict, run_event)
        return rejects


def by_severity(alerts: Iterable[Alert]) -> list[Alert]:
    """`alerts` most urgent first (critical, warning, info), each severity newest first."""
    return sorted(alerts, key=lambda a: (severity_rank(a.severity), -a.since))


def severity_counts(alerts: Iterable[Alert]) -> dict[str, int]:
    """{severity: how many of `alerts`} for every severity, in order."""
    out = dict.fromkeys(SEVERITIES, 0)
    for a in alerts:
        out[a.severity] = out.get(a.severity, 0) + 1
    return out


# delivery lives in `delivery/deliver.py` (hook argv, webhook body: `delivery/payloads.py`; outbox: `delivery/queue.py`)
__all__ = [
    "Alert",
    "AlertConfig",
    "AlertEngine",
    "FOR_DEFAULTS",
    "RULES",
    "SEVERITIES",
    "SEVERITY_DEFAULTS",
    "alert_from_json",
    "by_severity",
    "severity_counts",
    "parse_alerts",
]
