"""The rules of seats and the cards they share, judged on each poll with the other rules
(`alerts.AlertEngine`): gpu-headroom, idle-holder, seat-restart and seat-check.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fleetdeck.backend.fleet.alert_rules import AlertConfig, Hold
from fleetdeck.backend.fleet.models import HostSnapshot
from fleetdeck.backend.host.lib import units


def holders_by_host(m: Any) -> dict[str, list[str]]:
    """Each host's keys in `m.idle_since` ("host|card|pid|command"), in one pass: a poll of n
    hosts reads each key once, not once per host. Judging a host changes only its own keys."""
    out: dict[str, list[str]] = {}
    for k in m.idle_since:
        out.setdefault(k.split("|", 1)[0], []).append(k)
    return out


def checks_by_host(checks: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each host's seat checks (their keys are "host:port:kind"), in one pass."""
    out: dict[str, dict[str, Any]] = {}
    for k, c in checks.items():
        out.setdefault(k.split(":", 1)[0], {})[k] = c
    return out


def judge_holders(
    m: Any,
    config: AlertConfig,
    h: HostSnapshot,
    now: float,
    hold: Hold,
    mine: list[str] | None = None,
) -> None:
    """Hold gpu-headroom (a card holding a seat with less free than the floor) and idle-holder
    (a process neither a seat nor a run holding memory on an idle card) for `h`'s cards.
    `mine`: `h`'s keys in `m.idle_since` as `holders_by_host` found them this poll (None: looked
    up here, over every host's)."""
    seats = [(s, {*s.pids, s.pid}) for s in h.seats or ()]
    seat_pids = set().union(*(p for _, p in seats)) if seats else set()
    run_pids = {r.pid for r in h.runs if r.pid}
    floor = config.gpu_headroom_floor_gib * 1024
    idle_floor = config.idle_holder_gib * 1024
    watched = m.idle_since
    for g in h.gpus:
        if g.lost is not None or g.memory_total_mib is None:
            continue  # no figure of a lost card is known (gpu-lost says so); nor an unreported total
        held = sum(p.used_mib for p in g.processes)
        free = g.memory_total_mib - max(g.memory_used_mib or 0.0, held)
        if seats and not g.unified_memory and free < floor:
            shares = [
                (s, sum(p.used_mib for p in g.processes if p.pid in pids)) for s, pids in seats
            ]
            on_card = [(s, m) for s, m in shares if m]
            if on_card:
                hold(
                    "gpu-headroom",
                    h.name,
                    f"GPU{g.index}",
                    now,
                    f"GPU{g.index} on {h.name} has {free / 1024:.1f} GiB free, under the "
                    f"{config.gpu_headroom_floor_gib:g} GiB floor (seats: "
                    + ", ".join(f"{s.name} {m / 1024:.1f} GiB" for s, m in on_card)
                    + ")",
                )
        idle = g.utilization_pct is not None and g.utilization_pct <= config.idle_util_pct
        for p in g.processes:
            if (
                not idle
                or p.used_mib <= idle_floor
                or p.pid in seat_pids
                or p.pid in run_pids
                or "fleetdeck train" in p.command
            ):
                if watched:
                    watched.pop(f"{h.name}|{g.index}|{p.pid}|{p.command}", None)
                continue
            key = f"{h.name}|{g.index}|{p.pid}|{p.command}"
            since = watched.setdefault(key, h.time or now)
            if now - since >= config.idle_holder_minutes * 60:
                hold(
                    "idle-holder",
                    h.name,
                    f"pid {p.pid}",
                    since,
                    f"pid {p.pid} ({p.user}: {p.command[:80]}) holds {p.used_mib / 1024:.1f} GiB on "
                    f"GPU{g.index} of {h.name}, idle for {units.ago(now - since)}; it is neither a seat nor a run",
                )
    if watched:  # a holder that went away starts from zero if it comes back
        alive = {f"{h.name}|{g.index}|{p.pid}|{p.command}" for g in h.gpus for p in g.processes}
        if mine is None:
            mine = holders_by_host(m).get(h.name, [])
        for key in mine:
            if key not in alive:
                watched.pop(key, None)


def judge_seats(
    m: Any,
    config: AlertConfig,
    h: HostSnapshot,
    now: float,
    checks: Mapping[str, Any],
    hold: Hold,
    own: Mapping[str, Any] | None = None,
    checked: set[int] | None = None,
) -> None:
    """Hold seat-restart (the restart count grew, or the seat was OOM-killed, within
    `event_hold_minutes`) and seat-check (the seat's last check failed) for `h`'s seats.
    `checks`: the fleet's seat checks; `own`, `h`'s among them (`checks_by_host`), and
    `checked`, the ports they name: found once a poll (None: here, over every host's)."""
    for s in h.seats or ():
        prev = m.restarts.get(s.key)
        cur = (s.restarts, bool(s.oom_killed))
        m.restarts[s.key] = cur
        if prev is not None:
            grew = s.restarts is not None and prev[0] is not None and s.restarts > prev[0]
            oom = cur[1] and not prev[1]
            if grew or oom:
                what = []
                if grew:
                    what.append(
                        f"restarted {s.restarts - prev[0]} time(s) (RestartCount {s.restarts})"
                    )
                if oom:
                    what.append("was OOM-killed")
                m.events[s.key] = (
                    now,
                    f"seat {s.name} on {h.name} "
                    + " and ".join(what)
                    + f" at {time.strftime('%H:%M:%S', time.localtime(now))}",
                )
        ev = m.events.get(s.key)
        if ev and now - ev[0] < config.event_hold_minutes * 60:
            hold("seat-restart", h.name, s.name, ev[0], ev[1])
        elif ev:
            del m.events[s.key]
    ports = {s.port for s in h.seats or ()}
    listed = m.__dict__.setdefault("seat_ports", {}).setdefault(h.name, set())
    if own is None:
        own = checks_by_host(checks).get(h.name, {})
    for c in own.values():
        if c is not None and not c.sound:
            if c.port in listed and c.port not in ports:
                # the seat is gone (stopped with K, its container removed): so is what its last
                # check said; the alert resolves, saying why, and never pages again
                m.ended[f"seat-check|{h.name}|port {c.port}"] = (
                    f"seat {c.port} on {h.name} is gone "
                    f"(not listed at {time.strftime('%H:%M', time.localtime(now))})"
                )
                continue
            hold(
                "seat-check",
                h.name,
                f"port {c.port}",
                getattr(c, "checked_at", 0) or now,
                f"seat on {h.name}:{c.port} failed its check: {c.signature}: {c.message}",
            )
    # a seat once listed and listed no more is gone; a port checked by hand and never listed
    # (`seats check HOST PORT` on something the probe does not find) keeps its verdict
    if checked is None:
        checked = {c.port for c in checks.values() if c is not None}
    listed.intersection_update(ports | checked)
    listed.update(ports)


__all__ = ["checks_by_host", "holders_by_host", "judge_holders", "judge_seats"]
