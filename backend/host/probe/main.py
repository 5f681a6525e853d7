"""fleetdeck's host probe: one stdlib-only module (Python 3.8+) that answers with a JSON snapshot.

Sent to each host by the poller and run there as `python3 -c BOOT --resident` (or locally as a
subprocess). Resident mode reads one JSON request per line on stdin and writes one JSON reply per
line on stdout until EOF, so NVML is initialised once and file parses are cached between polls.
One-shot: `python3 probe.py REQUEST_JSON`, `python3 - REQUEST_JSON < probe.py`, or the request as
JSON on stdin. In-process: `snapshot(request) -> dict`.

Request: {"op": "snapshot", "runs": [...], "disk_paths": [...], "stall_factor": 10,
"fresh": false, "gpu": "auto" | "nvml" | "nvidia-smi" | "none", "held": N} or {"op": "ping"}.
With `held` (the number of the last answer the controller holds) only the sections that changed
since travel (delta.py).
Every section is guarded on its own: a failure becomes a line in `warnings`, never a crash.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import time
from collections.abc import Iterable

from fleetdeck.backend.host.lib import flags, fsinfo, layout, procfs, serve
from fleetdeck.backend.host.probe import run_state
from fleetdeck.backend.host.probe.common import (
    CACHE,
    STATE,
    Procs,
    guard,
    meminfo,
)
from fleetdeck.backend.host.probe.delta import ANSWERS
from fleetdeck.backend.host.probe.gpu import gpus
from fleetdeck.backend.host.probe.proc_table import ProcTable
from fleetdeck.backend.host.probe.procs import processes
from fleetdeck.backend.host.probe.run_progress import full_series
from fleetdeck.backend.host.probe.runs import runs
from fleetdeck.backend.host.probe.schedules import schedules
from fleetdeck.backend.host.probe.seats import find_seats

# -- memory, load, disks ------------------------------------------------------------------------


def memory() -> dict[str, int]:
    """System memory: total, and used as MemTotal - MemAvailable."""
    try:
        m = meminfo(("MemTotal", "MemAvailable", "MemFree"))
        return {
            "total_bytes": m["MemTotal"],
            "used_bytes": m["MemTotal"] - m.get("MemAvailable", m.get("MemFree", 0)),
        }
    except (OSError, KeyError):
        import psutil  # only off Linux; ImportError lands in warnings

        v = psutil.virtual_memory()
        return {"total_bytes": v.total, "used_bytes": v.total - v.available}


def load1() -> float:
    """The 1-minute load average."""
    try:
        return float(procfs.read_bytes("/proc/loadavg").split()[0])
    except (OSError, IndexError, ValueError):
        return os.getloadavg()[0]


class MountTable:
    """/proc/self/mountinfo as last read, read again only when the kernel says the mount table
    changed (it wakes a poll(2) on an open mountinfo with POLLPRI at every mount and unmount)
    and every REREAD_EVERY polls whatever it said, or at every poll where poll(2) is missing."""

    REREAD_EVERY = 30

    def __init__(self) -> None:
        self.table: list[tuple[str, str, str]] | None = None
        self.polls = 0
        self.watch: select.poll | None = None

    def mounts(self, fresh: bool = False) -> list[tuple[str, str, str]]:
        """[(mount point, fstype, source)] as `fsinfo.read_mounts` gives them."""
        changed = fresh or self.table is None or self.polls % self.REREAD_EVERY == 0
        self.polls += 1
        try:
            if self.watch is None and hasattr(select, "poll"):
                fd = os.open("/proc/self/mountinfo", flags.READ)
                self.watch = select.poll()
                self.watch.register(fd, select.POLLPRI | select.POLLERR)
                changed = True
            changed = changed or self.watch is None or bool(self.watch.poll(0))
        except OSError:
            changed = True
        if changed or self.table is None:  # (changed is true when it is None)
            self.table = fsinfo.read_mounts()
        return self.table


MOUNTS = MountTable()


def disks(paths: Iterable[str], fresh: bool = False) -> list[dict]:
    """The filesystem behind each configured folder (nearest existing parent if it is missing)."""
    return [d for d, _at in _disks(paths, fresh)]


def _disks(paths: Iterable[str], fresh: bool) -> list[tuple[dict, str | None]]:
    """(each folder's disk record, the folder its figures are read at, None after an error)."""
    mounts = MOUNTS.mounts(fresh)
    out, seen = [], set()
    for p in paths:
        if p in seen:
            continue
        seen.add(p)
        d = {
            "path": p,
            "mount": "",
            "fstype": "",
            "total_bytes": 0,
            "used_bytes": 0,
            "free_bytes": 0,
            "error": None,
        }
        at = None  # type: str | None
        try:
            real = os.path.realpath(os.path.expanduser(p))
            probe_at = real
            while not os.path.exists(probe_at) and probe_at != "/":
                probe_at = os.path.dirname(probe_at)
            if probe_at != real:
                d["error"] = f"does not exist (figures for {probe_at})"
            mnt, fstype, _src = fsinfo.mount_of(probe_at, mounts)
            total, used, free = fsinfo.usage(probe_at)
            d.update(mount=mnt, fstype=fstype, total_bytes=total, used_bytes=used, free_bytes=free)
            at = probe_at
        except OSError as e:
            d["error"] = f"{p}: {e.strerror or e}"
        out.append((d, at))
    return out


class DiskCadence:
    """Where each disk is, at a slower cadence of its own: a resident probe resolves each
    folder (realpath, the walk up to one that exists, its mount) again only when the folders
    asked for change, when asked fresh, or EVERY_S seconds after the last resolution; between,
    it reads only the figures (one statvfs a folder), so a filling disk is seen at every poll
    (the disk-full rule's slope needs them) and a folder that went away is resolved at once."""

    EVERY_S = 5.0

    def __init__(self) -> None:
        self.key: tuple[str, ...] | None = None
        self.at = 0.0
        self.last: list[tuple[dict, str | None]] = []

    def read(self, paths: Iterable[str], fresh: bool = False) -> list[dict]:
        """`disks(paths)`, from the last resolution while it is younger than EVERY_S."""
        key, now = tuple(paths), time.monotonic()
        if fresh or key != self.key or not 0 <= now - self.at < self.EVERY_S:
            self.last, self.key, self.at = _disks(key, fresh), key, now
            return [dict(d) for d, _at in self.last]
        out = []
        try:
            for d, at in self.last:
                d = dict(d)
                if at is not None:
                    total, used, free = fsinfo.usage(at)
                    d.update(total_bytes=total, used_bytes=used, free_bytes=free)
                out.append(d)
        except OSError:  # gone since it was resolved: resolve every folder again now
            self.key = None
            return self.read(key, fresh)
        return out


DISKS = DiskCadence()


# -- the snapshot and the two ways to be asked for it ---------------------------------------------

#: the processes as the last poll saw them: a resident probe reads a command line again only
#: when its process's stat moved (proc_table)
PROC_TABLE = ProcTable()


def snapshot(request: dict | None = None) -> dict:
    """One snapshot of this host as the contract's probe reply (see the module docstring)."""
    req = request or {}
    if len(CACHE) > 20000:  # runs come and go over a long session; the cache only saves time
        CACHE.clear()
    now = time.time()
    warnings = []  # type: list
    fresh = bool(req.get("fresh"))
    procs = guard(warnings, "processes", lambda: Procs(table=PROC_TABLE, fresh=fresh), None)
    if procs is None:
        procs = Procs.empty()
    procs.know(req.get("ours"))
    run_state.adopt(req.get("workers"))
    mode = req.get("gpu") or os.environ.get("FLEETDECK_PROBE_GPU") or "auto"
    g, source = guard(warnings, "gpus", lambda: gpus(mode, procs, warnings), ([], None))
    paths = req.get("disk_paths")
    reply = {
        "memory": guard(warnings, "memory", memory, {"total_bytes": 0, "used_bytes": 0}),
        "load1": guard(warnings, "load", load1, None),
        "gpus": g,
        "gpu_source": source,
        "disks": guard(
            warnings,
            "disks",
            lambda: DISKS.read(paths if paths is not None else req.get("runs") or [], fresh),
            [],
        ),
        "runs": guard(warnings, "runs", lambda: runs(req, procs, warnings, now), []),
        "schedules": guard(warnings, "schedules", lambda: schedules(req, procs, warnings), []),
        "seats": guard(
            warnings, "seats", lambda: find_seats(docker_ttl=30, procs=procs)["seats"], None
        ),
        "warnings": warnings,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "time": now,
    }
    t = os.times()
    reply["processes"] = guard(
        warnings,
        "processes",
        lambda: processes(procs, reply["gpus"], reply["runs"], reply["seats"], reply["schedules"]),
        [],
    )
    reply["probe_cpu_s"] = round(time.process_time(), 6)
    reply["probe_children_cpu_s"] = round(t[2] + t[3], 4)
    # `held`: the answer the controller holds; the sections unchanged since it are named only
    return ANSWERS.framed(reply, req.get("held"), fresh)


def ping(req: dict) -> dict:
    """Liveness: the probe answers."""
    return {}


def series(req: dict) -> dict:
    """One run's whole loss and eval-loss series (a snapshot carries at most SERIES_POINTS of
    each): {"op": "series", "path": RUN_DIR} -> {"losses": [[step, v]...], "eval_losses": [...]}."""
    given = str(req.get("path") or "")
    if req.get("roots") is not None:  # a name or a path under a runs root: the one rule
        try:
            given = layout.resolve_run(given, req.get("roots") or [])
        except LookupError as e:
            raise serve.Refused(*e.args) from None
    return dict(full_series(given), path=given)


OPS = {"snapshot": snapshot, "ping": ping, "series": series}


def handle(req: object) -> dict:
    """One request -> one answer dict in the one shape (`serve.dispatch`), never an exception;
    a request without `op` asks for a snapshot."""
    if isinstance(req, dict) and "op" not in req:
        req = dict(req, op="snapshot")
    return serve.dispatch(OPS, req)


def main(argv: list[str]) -> int:
    """Resident (`--resident`: a JSON line in, a JSON line out, until EOF) or one-shot (the
    request as the first argument, or as JSON on stdin; none asks for a snapshot)."""
    if "--resident" in argv[1:]:
        STATE["resident"] = True  # NVML's Xid watch and sampler only pay off in a long-lived probe
        return serve.serve(_Defaulted(), resident=True)
    if len(argv) > 1 and not argv[1].startswith("-"):
        req = json.loads(argv[1])
    else:
        data = sys.stdin.read() if not sys.stdin.isatty() else ""
        req = json.loads(data) if data.strip() else {}
    sys.stdout.write(serve.dumps(handle(req)) + "\n")
    sys.stdout.flush()
    return 0


class _Defaulted(dict):
    """OPS for the resident loop, where a request without `op` is a snapshot too."""

    def __init__(self) -> None:
        dict.__init__(self, OPS)
        self[None] = snapshot


if __name__ == "__main__":
    sys.exit(main(sys.argv))
