"""`run-finished` and `run-failed`: a run's end, seen live, through the same hooks as every alert.

The operator's ":37 check on the run ... inform when ready" cron job existed because they wanted
to be told when a run was ready; with these two rules that is the `[alerts]` hook
(docs/schedules.md, "Told when a run is ready").

- **run-finished** (info): a run the engine saw live (running, stalled or queued) now shows
  `finished` *with* a final adapter, by the layout's one rule (`host/lib/layout.final_adapter`:
  a real folder with non-empty `adapter_model.safetensors` and `adapter_config.json`; the probe
  puts its path in `Run.adapter`). A run that reached its last step but has no complete adapter
  yet waits (`FINISHING`) and fires when the adapter is there.
- **run-failed** (critical): a run seen live now shows `failed`; the text carries the reason the
  runs listing shows (`Run.reason`: the trainer's own words, or why the probe judged it failed).

Only a change seen live pages: the first look at a run (a new engine, a new host, a run folder
that appears already finished, as a mirrored adapter does) records its state and fires nothing.
Each is an event: it fires on the poll that sees the change and stays firing for
`event_hold_minutes`, as `seat-restart` does, then resolves. The runs' last states and the
events are saved with the engine's state, so a restart of `watch` between two polls neither
misses an end nor pages it twice.
"""

from __future__ import annotations

from typing import Any

from fleetdeck.backend.fleet.alert_rules import AlertConfig, Hold
from fleetdeck.backend.fleet.models import HostSnapshot, Run
from fleetdeck.backend.host.lib.text import one_line, shown

#: a run that showed `finished` before its final adapter was complete, after being seen live
FINISHING = "finishing"
#: the states a run is seen live in, from which its end pages
LIVE = ("running", "stalled", "queued", FINISHING)


def finished_text(h: HostSnapshot, r: Run) -> str:
    """The sentence of a run-finished alert."""
    at = (
        f" at step {r.step}" + (f" of {r.max_steps}" if r.max_steps else "")
        if r.step is not None
        else ""
    )
    best = min(r.eval_losses, key=lambda x: x[1]) if r.eval_losses else None
    ev = f"; best eval loss {best[1]:.4g} at step {best[0]}" if best else ""
    # host parts escaped (`shown`): a newline in a run folder's name forges no line in a page
    return (
        f"run {shown(r.name)} on {h.name} finished{at}: its final adapter is ready at "
        f"{shown(r.adapter)}{ev}"
    )


def failed_text(h: HostSnapshot, r: Run) -> str:
    """The sentence of a run-failed alert: the reason the runs listing shows."""
    at = (
        f" at step {r.step}" + (f" of {r.max_steps}" if r.max_steps else "")
        if r.step is not None
        else ""
    )
    return f"run {shown(r.name)} on {h.name} failed{at}: {one_line(r.reason) or 'no reason given'}"


#: one host's keys in the engine's memory: its runs (`m.runs`) and its events (`m.run_events`)
HostKeys = tuple[list[str], list[str]]


def keys_by_host(m: Any) -> dict[str, HostKeys]:
    """Each host's keys in `m.runs` ("host|path") and `m.run_events` ("rule|host|path"), in one
    pass over both: a poll of n hosts reads each key once, not once per host. Taken before the
    poll's hosts are judged; judging a host changes only its own keys."""
    out: dict[str, HostKeys] = {}
    for k in m.runs:
        out.setdefault(k.split("|", 1)[0], ([], []))[0].append(k)
    for k in m.run_events:
        out.setdefault(k.split("|", 2)[1], ([], []))[1].append(k)
    return out


def judge_runs(
    m: Any,
    config: AlertConfig,
    h: HostSnapshot,
    now: float,
    hold: Hold,
    keys: HostKeys | None = None,
) -> None:
    """Record each run's state on reachable host `h` and hold the ends seen live (see the module
    docstring). `m` is the engine's memory (`runs`, `run_events`); `keys`: `h`'s keys in it as
    `keys_by_host` found them this poll (None: looked up here, over every host's)."""
    if keys is None:
        keys = keys_by_host(m).get(h.name, ([], []))
    mine = h.name + "|"
    seen: dict[str, str] = {}
    for r in h.runs:
        key = mine + r.path
        prev = m.runs.get(key)
        state = r.state
        if prev in LIVE:
            if r.state == "finished" and r.adapter:
                m.run_events[f"run-finished|{key}"] = (now, finished_text(h, r))
            elif r.state == "finished":
                state = FINISHING  # the last step, not yet the adapter: it pages when that is there
            elif r.state == "failed":
                m.run_events[f"run-failed|{key}"] = (now, failed_text(h, r))
        seen[key] = state
    for key in keys[0]:
        if key not in seen:
            m.runs.pop(key, None)  # gone from the listing: if it comes back, a first look
    m.runs.update(seen)
    hold_s = config.event_hold_minutes * 60
    # the events held before this poll, then those it found (each once, in the order held)
    new = (f"{rule}|{k}" for k in seen for rule in ("run-finished", "run-failed"))
    for key in dict.fromkeys([*keys[1], *new]):
        if key not in m.run_events:
            continue
        t, text = m.run_events[key]
        rule, host, path = key.split("|", 2)
        if now - t < hold_s:
            hold(rule, host, path, t, text)
        else:
            del m.run_events[key]


__all__ = [
    "FINISHING",
    "LIVE",
    "HostKeys",
    "failed_text",
    "finished_text",
    "judge_runs",
    "keys_by_host",
]
