"""Why an alert resolved when its subject is gone rather than sound: the sentence its resolve
carries, so that the operator reads "run folder /runs/r7 on gx10 is gone" and not the words it
fired with, which would read as the trouble again (a resolve is never a new incident).

An alert ends when its subject does (issue: "an alert ends when its subject does"):

- a host taken out of the fleet file: every alert of it;
- a run folder removed (the host answers and lists no run at that path): the run's alerts;
- a GPU no longer present (the host answers and lists no card of that index): the card's;
- a seat gone: `seat_alerts.judge_seats` says so itself (`_Memory.ended`).

A host that does not answer is not a host gone: its alerts stay as they were (`alerts.py`), so
nothing here is said of it.
"""

from __future__ import annotations

import re
import time
from typing import Any

from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.backend.host.lib.text import shown

#: rules whose subject is a run's folder
RUN_RULES = (
    "run-stalled",
    "loss-nonfinite",
    "loss-spike",
    "overfitting",
    "run-finished",
    "run-failed",
)
#: rules whose subject names a card (`GPU<index>`, gpu-xid's `GPU<index> Xid <code>`)
GPU_RULES = ("gpu-headroom", "gpu-throttled", "gpu-hot", "gpu-ecc", "gpu-xid", "gpu-lost")
_GPU = re.compile(r"GPU(\d+)(?: Xid .*)?")


def _at(now: float) -> str:
    return time.strftime("%H:%M", time.localtime(now))


def subject_gone(a: Any, snap: FleetSnapshot, now: float) -> str | None:
    """The sentence for the resolve of firing alert `a` whose subject is gone from `snap`, or
    None when its subject is still there (it resolved because its condition no longer holds)."""
    hosts = {h.name: h for h in snap.hosts}
    h = hosts.get(a.host)
    if h is None:
        return f"{shown(a.host)} is no longer in the fleet file (not polled at {_at(now)})"
    if not h.reachable:
        return None
    if a.rule in RUN_RULES and a.subject not in {r.path for r in h.runs}:
        return (
            f"run folder {shown(a.subject)} on {shown(a.host)} is gone (not listed at {_at(now)})"
        )
    m = _GPU.fullmatch(a.subject) if a.rule in GPU_RULES else None
    if m and int(m.group(1)) not in {g.index for g in h.gpus}:
        return f"GPU{m.group(1)} on {shown(a.host)} is no longer present (not listed at {_at(now)})"
    return None


__all__ = ["GPU_RULES", "RUN_RULES", "subject_gone"]
