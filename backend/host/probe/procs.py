"""The probe's processes section: the processes on a host that matter to the operator.

Runs on the host's Python 3.8 or newer, bundled with the probe. Listed: every process holding
GPU memory, every live run's trainer, every serving seat, every loop, every stopped (paused)
process, the top few by CPU and by resident memory, and the workers of each trainer and seat (its descendants, up to WORKERS,
listed with its tag: a dataloader worker is part of its run); at most MAX_PROCESSES, each with
its pid and start time (its identity, for a checked stop), parent pid (`ppid`, for the Host
view's tree), user, CPU share since the previous poll, resident bytes, GPU memory and why it is
listed. The command line is cut to COMMAND_CHARS; the controller escapes it for display.
"""
# ruff: noqa: UP031

from __future__ import annotations

import os
import time

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.probe.common import STATE, Procs, user_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from fleetdeck.backend.host.probe.wire import GpuRecord, ProcessRecord

MAX_PROCESSES = 40
TOP = 5  # the top users of CPU and of memory listed beside the tagged ones
WORKERS = 8  # a trainer's or a seat's descendants listed under it
COMMAND_CHARS = 512
_TICK = procfs.clock_ticks()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def processes(
    procs: Procs,
    gpus: list[GpuRecord] | None,
    runs: list[dict] | None,
    seats: list[dict] | None,
    schedules: list[dict] | None,
) -> list[ProcessRecord]:
    """The processes section (see the module docstring)."""
    why = {}  # type: dict
    gpu_mib = {}  # type: dict

    def tag(pid: object, t: str) -> None:
        if isinstance(pid, int) and pid > 0:
            why.setdefault(pid, [])
            if t not in why[pid]:
                why[pid].append(t)

    for g in gpus or []:
        for gp in g.get("processes") or []:
            tag(gp.get("pid"), "gpu")
            if isinstance(gp.get("pid"), int):
                gpu_mib[gp["pid"]] = gpu_mib.get(gp["pid"], 0.0) + float(gp.get("used_mib") or 0)
    for r in runs or []:
        if r.get("state") in ("running", "stalled"):
            tag(r.get("pid"), "run")
    for s in seats or []:
        tag(s.get("pid"), "seat")
    for s in schedules or []:
        if s.get("kind") == "loop":
            tag(s.get("pid"), "loop")
    now = time.monotonic()
    last = STATE.get("cpu") or {}
    seen = {}
    rows = {}
    for pid in procs.others():
        if procs.ours(pid):
            continue
        u = procs.usage(pid)  # the poll's one read of /proc/PID/stat
        if u is None:
            continue
        ticks, rss, start, state = u[0], u[1] * _PAGE, u[2], u[3]
        if state in ("T", "t"):  # stopped (SIGSTOP) or traced: no CPU to be listed by, and the
            tag(pid, "stopped")  # operator who paused it must find it to send CONT
        seen[(pid, start)] = (ticks, now)
        prev = last.get((pid, start))
        cpu = None
        if prev is not None and now > prev[1]:
            cpu = round(100.0 * (ticks - prev[0]) / _TICK / (now - prev[1]), 1)
        rows[pid] = (cpu, rss, start)
    STATE["cpu"] = seen
    for pid in [p for p in why if p in rows and ("run" in why[p] or "seat" in why[p])]:
        for kid in [k for k in procfs.descendants(pid) if k in rows][:WORKERS]:
            for t in why[pid]:
                if t in ("run", "seat"):
                    tag(kid, t)
    chosen = [p for p in why if p in rows]
    by_cpu = sorted((p for p in rows if rows[p][0]), key=lambda p: -(rows[p][0] or 0.0))[:TOP]
    by_mem = sorted(rows, key=lambda p: -rows[p][1])[:TOP]
    for p in by_cpu:
        tag(p, "cpu")
    for p in by_mem:
        tag(p, "memory")
    order = {"gpu": 0, "run": 1, "seat": 2, "loop": 3, "stopped": 4, "cpu": 5, "memory": 6}
    chosen = sorted(
        set(chosen) | set(by_cpu) | set(by_mem),
        key=lambda p: (min(order[t] for t in why[p]), -(rows[p][0] or 0), -rows[p][1]),
    )
    out: list[ProcessRecord] = []
    for pid in chosen[:MAX_PROCESSES]:
        cpu, rss, start = rows[pid]
        uid = procs.uid(pid)  # looked up for the listed few only, not every process
        out.append(
            {
                "pid": pid,
                "start": start,
                "ppid": procs.ppid(pid),
                "user": "?" if uid is None else user_name(uid),
                "cpu_pct": cpu,
                "rss_bytes": rss,
                "gpu_mib": gpu_mib.get(pid),
                "why": why[pid],
                "command": " ".join(procs.argv(pid))[:COMMAND_CHARS],
            }
        )
    return out
