"""`new-stray`: a stray schedule, and the first look at a host.

A host seen for the first time (its first answered poll in this state folder) holds what it has
always held: on the operator's four hosts that was 49 unacknowledged crontab lines, each its own
`new-stray` at first paint, burying the one alert that mattered. So the first look raises one
`new-stray` for all of them (subject `FIRST_LOOK`), naming how many there are and how to
baseline them (`fleetdeck schedules ack --host H --all`); it stays firing, its count falling,
while any of them is still stray, and resolves when none is. A schedule that turns up after the
first look is news and fires on its own, as before. A first look with one stray schedule fires
that one on its own (one alert either way).

What the engine keeps (`alerts._Memory`): the hosts it has looked at (`looked`) and, per host,
the ids the first look folded into one (`first_look`), both saved with its state. A state saved
before this existed has no `looked`: each host's next poll is its first look, and a schedule
already firing on its own stays on its own, so an upgrade neither resolves nor repeats it.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.audit_records import RemoveRecord, parse
from fleetdeck.backend.fleet.alert_rules import AlertConfig, Hold
from fleetdeck.backend.fleet.models import HostSnapshot, Schedule
from fleetdeck.backend.fleet.schedule_verdict import action_rank, norm_command
from fleetdeck.backend.host.lib.text import shown

#: the subject of the first look's one alert (a schedule id is a kind letter, a dash and hex)
FIRST_LOOK = "unacknowledged schedules"


# -- a stray that comes back ------------------------------------------------------------------------
_REMOVALS: dict[str, Any] = {"key": None, "by_host": {}}


def removals() -> dict[str, list[dict[str, Any]]]:
    """Every schedule `schedules remove` took away (audit records `schedule-remove`, `done`), by
    host: {"ts", "n" (its line number in the audit log), "id", "command", "user"}. The log is
    read again only when it changed (its inode, size and mtime)."""
    try:
        st = os.stat(audit.audit_path())
    except OSError:
        return {}
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    if _REMOVALS["key"] != key:
        by_host: dict[str, list[dict[str, Any]]] = {}
        for n, line in enumerate(audit.read_audit(), 1):
            rec = parse(line)
            if not isinstance(rec, RemoveRecord) or rec.result != "done":
                continue
            s: dict[str, Any] = rec.schedule if isinstance(rec.schedule, dict) else {}
            ts = rec.stamp.ts if rec.stamp is not None else None
            if ts is None or rec.host is None:
                continue
            by_host.setdefault(rec.host, []).append(
                {
                    "ts": ts,
                    "n": n,
                    "id": s.get("id"),
                    "command": norm_command(str(s.get("command") or "")),
                    "user": rec.stamp.user if rec.stamp is not None else "?",
                }
            )
        _REMOVALS["key"], _REMOVALS["by_host"] = key, by_host
    return _REMOVALS["by_host"]


def returned(
    h: HostSnapshot, s: Schedule, removed: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The last removal of this schedule (the same id, or the same command) on `h`, when it is
    listed again after it: who removed it, when, and its audit record. `removed`: `h`'s
    removals as `removals()` gave them (None: read here)."""
    if removed is None:
        removed = removals().get(h.name, [])
    if not removed:
        return None
    cmd = norm_command(s.command)
    hits = [r for r in removed if r["id"] == s.id or (cmd and r["command"] == cmd)]
    return max(hits, key=lambda r: r["ts"]) if hits else None


def returned_text(h: HostSnapshot, s: Schedule, r: dict[str, Any], now: float) -> str:
    hm = time.strftime("%H:%M", time.localtime(r["ts"]))
    return (
        f"stray {s.kind} on {h.name} came back: removed {hm} by {shown(r['user'])} (audit "
        f"#{r['n']}), back at {time.strftime('%H:%M', time.localtime(now))}: who restores it? "
        f"{shown(s.command[:200])[:200]}"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


#: words that make a schedule someone's way of waiting on a run (the ":37 check on the run ...
#: inform when ready" job): the first look names such a one before a backup job
WAITING_WORDS = re.compile(r"\b(inform|notify|check|ready|wait|poll|ping)\b", re.I)
#: the urgency rule the first look names its most urgent schedule by, most urgent first
URGENCY = (
    "names a path that does not exist",
    "a shell loop",
    "runs hourly or more often and speaks of waiting (inform, check, ready...)",
    "runs more than once in the fleet",
    "unacknowledged",
)


def _often(spec: str) -> bool:
    """True for a cron spec that fires at least hourly (`37 * * * *`, `*/5 * * * *`), a timer
    or loop interval under an hour."""
    f = spec.split()
    if len(f) >= 5:
        return f[1] == "*" or f[1].startswith("*/")
    m = re.search(r"every (\d+)\s*([smh])", spec)
    if m is None:
        return False
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)] <= 3600


def urgency(s: Schedule) -> int:
    """Where `s` stands in URGENCY (0 most urgent)."""
    if "dead-target" in s.reasons:
        return 0
    if s.kind == "loop":
        return 1
    if _often(s.spec or "") and WAITING_WORDS.search(s.command or ""):
        return 2
    if "duplicate" in s.reasons:
        return 3
    return 4


def command_text(command: str, limit: int = 120) -> str:
    """A schedule's command for a sentence, escaped: whole when it fits, else its head and its
    tail (where `# inform when ready` and the script's name are), never cut before the words
    that tell it apart."""
    c = shown(command)
    if len(c) <= limit:
        return c
    head = limit // 2
    return c[:head] + " … " + c[-(limit - head - 3) :]


def one_text(h: HostSnapshot, s: Schedule) -> str:
    """The sentence of one stray schedule's alert."""
    return f"stray {s.kind} on {h.name} ({', '.join(s.reasons)}): {command_text(s.command)}"


def first_look_text(h: HostSnapshot, members: list[Schedule]) -> str:
    """The sentence of the first look's alert: how many, what to do, and the most urgent one."""
    n = len(members)
    unacked = sum("unacknowledged" in s.reasons for s in members)
    dead = sum("dead-target" in s.reasons for s in members)
    parts = [f"{unacked} unacknowledged"] + ([f"{dead} naming a missing path"] if dead else [])
    top = min(members, key=lambda s: (urgency(s), action_rank(s), s.kind, s.id))
    return (
        f"{h.name} holds {_plural(n, 'stray schedule')} seen at the first look ({', '.join(parts)}): "
        f"`fleetdeck schedules --host {h.name} --stray-only` lists them, `fleetdeck schedules ack "
        f"--host {h.name} --all` baselines them; the most urgent ({URGENCY[urgency(top)]}): "
        f"{one_text(h, top)}"
    )


def judge_strays(
    m: Any,
    config: AlertConfig,
    h: HostSnapshot,
    now: float,
    hold: Hold,
    settle: dict[str, float],
    loop_settle: float,
) -> None:
    """Hold `new-stray` for the stray schedules of reachable host `h` (see the module docstring).
    `m` is the engine's memory; `settle` gets the extra wait of a loop that must last
    `loop_settle` seconds before it pages."""
    strays = [s for s in h.schedules if s.stray]
    back = {}
    first_seen = m.__dict__.setdefault("stray_back", {})
    removed = removals().get(h.name, []) if strays else []  # the audit log looked at once a host
    for s in strays:
        r = returned(h, s, removed)
        if r is not None and r["ts"] < now:
            back[s.id] = r
            at = first_seen.setdefault(f"{h.name}|{s.id}|{r['n']}", now)
            # said first, ranked above every unacknowledged line: someone or something restores it
            hold("stray-returned", h.name, s.id, at, returned_text(h, s, r, at))
    strays = [s for s in strays if s.id not in back]
    if h.name not in m.looked:
        m.looked.add(h.name)
        mine = f"new-stray|{h.name}|"
        known = {k[len(mine) :] for k in (*m.firing, *m.pending) if k.startswith(mine)}
        first = [s.id for s in strays if s.id not in known]
        if len(first) >= 2:
            m.first_look[h.name] = sorted(set(first))
    base = set(m.first_look.get(h.name, ()))
    members = [s for s in strays if s.id in base]
    if base and not members:
        del m.first_look[h.name]  # every one acknowledged or removed: it resolves
    elif members:
        sev = config.severity_set("new-stray") or (
            "warning" if any("dead-target" in s.reasons for s in members) else "info"
        )
        hold("new-stray", h.name, FIRST_LOOK, now, first_look_text(h, members), sev)
        if (
            all(s.kind == "loop" and "dead-target" not in s.reasons for s in members)
            and loop_settle
        ):
            settle[f"new-stray|{h.name}|{FIRST_LOOK}"] = loop_settle
    for s in strays:
        if s.id in base:
            continue
        # a schedule naming a path that does not exist is wrong, not only news
        sev = config.severity_set("new-stray") or (
            "warning" if "dead-target" in s.reasons else "info"
        )
        hold("new-stray", h.name, s.id, now, one_text(h, s), sev)
        if s.kind == "loop" and "dead-target" not in s.reasons and loop_settle:
            # a loop that ends within a minute (a script's short `for`) never pages; one naming
            # a path that does not exist is wrong however long it runs
            settle[f"new-stray|{h.name}|{s.id}"] = loop_settle


__all__ = ["FIRST_LOOK", "first_look_text", "judge_strays", "one_text"]
