"""disk-full-eta, judged on each poll with the other rules (`alerts.AlertEngine`): a disk that
fills within `disk_full_hours` at the rate seen over `disk_rate_window`, from the samples the
engine keeps per disk (`add_disk_sample`; history preloads the window).

The rate must be positive over the window, in each of its thirds, and recent: used space grew
within the last tenth of the window (3 minutes of the default 30). A disk whose writing stopped,
its free space flat since, resolves then, and a wait for `for` that was under way starts over:
an ETA is never said of writing that has stopped.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from fleetdeck.backend.fleet.alert_rules import AlertConfig, Hold
from fleetdeck.backend.fleet.models import HostSnapshot
from fleetdeck.backend.host.lib import units
from fleetdeck.backend.host.lib.text import shown

#: disk-full-eta needs a sustained trend: used space must have grown in each of this many equal
#: parts of the samples' span, not in one burst
DISK_TREND_PARTS = 3
#: ... and in the newest 1/DISK_RECENT_PART of the window: a fill rate that is recent
DISK_RECENT_PART = 10


def add_disk_sample(m: Any, host: str, path: str, t: float, used: int, free: int) -> None:
    """Feed one disk sample (history preloads the window this way)."""
    q = m.disk.setdefault(f"{host}|{path}", deque(maxlen=4096))
    if not q or t > q[-1][0]:
        q.append((t, used, free))


def judge_disks(m: Any, config: AlertConfig, h: HostSnapshot, now: float, hold: Hold) -> None:
    """Feed each disk of `h` its sample and hold disk-full-eta where it fills within
    `disk_full_hours` at the rate over the window."""
    seen = set()
    for d in h.disks:
        if d.error or not d.total_bytes or d.mount in seen:
            continue
        seen.add(d.mount)
        add_disk_sample(m, h.name, d.path, h.time or now, d.used_bytes, d.free_bytes)
        eta = disk_eta(m, config, h.name, d.path)
        if eta is not None and eta < config.disk_full_hours * 3600:
            hold(
                "disk-full-eta",
                h.name,
                d.path,
                now,
                f"{shown(d.path)} on {h.name} ({shown(d.mount)}) fills in about {units.ago(eta)} at the current rate "
                f"({units.size(d.free_bytes)} free)",
            )


def disk_eta(m: Any, config: AlertConfig, host: str, path: str) -> float | None:
    """Seconds until the disk behind `path` is full at the rate over the window, or None
    when it is not filling steadily: the samples must span `disk_rate_min_span` and used
    space must have grown in each of DISK_TREND_PARTS equal parts of their span (a burst of
    writes in one part, then quiet, is no trend) and since the last sample at or before a
    DISK_RECENT_PART-th of the window ago (writing that stopped is no rate)."""
    q = m.disk.get(f"{host}|{path}")
    if not q or len(q) < 2:
        return None
    t_last = q[-1][0]
    while len(q) > 2 and q[0][0] < t_last - config.disk_rate_window:
        q.popleft()
    (t0, u0, _), (t1, u1, free) = q[0], q[-1]
    span = t1 - t0
    if span < config.disk_rate_min_span or u1 <= u0:
        return None
    marks, i = [u0], 0
    for part in range(1, DISK_TREND_PARTS):
        edge = t0 + span * part / DISK_TREND_PARTS
        while i + 1 < len(q) and q[i + 1][0] <= edge:
            i += 1
        marks.append(q[i][1])  # used at the last sample at or before the edge
    marks.append(u1)
    if any(b <= a for a, b in zip(marks, marks[1:], strict=False)):
        return None
    recent = t1 - config.disk_rate_window / DISK_RECENT_PART
    if u1 <= next((u for t, u, _ in reversed(q) if t <= recent), u0):
        return None
    return free / ((u1 - u0) / span)


__all__ = ["DISK_RECENT_PART", "DISK_TREND_PARTS", "add_disk_sample", "disk_eta", "judge_disks"]
