"""The host's GPUs, memory and disk against a run's estimate (stdlib only, Python 3.8 or
newer): what nvidia-smi and /proc/meminfo say, and launch's `gpus`, `memory` and `disk` checks.
"""

from __future__ import annotations

import json
import os
import shutil

from fleetdeck.backend.host.launch.estimate import MIB, parts_text
from fleetdeck.backend.host.lib import runner, units

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional

    from fleetdeck.backend.host.launch.wire import Check


def mem_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _num(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:
        return None


def gpu_table() -> Dict[str, Any]:
    """GPUs and their compute processes per nvidia-smi; empty lists when the host has none."""
    smi = shutil.which("nvidia-smi")
    out: Dict[str, Any] = {"gpus": [], "apps": [], "error": None}
    if smi is None:
        return out
    r = runner.run(
        [
            smi,
            "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free",
            "--format=csv,noheader,nounits",
        ],
        timeout=20,
    )
    a = runner.run(
        [smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        timeout=20,
    )
    if r.rc in (124, 126, 127):
        out["error"] = "nvidia-smi failed: " + runner.first_line(r.err)
        return out
    host_free = mem_available()
    for line in r.out.decode("utf-8", "replace").splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6 or not f[0].isdigit():
            continue
        total, used, free = _num(f[3]), _num(f[4]), _num(f[5])
        unified = total is None  # unified memory (GB10): the driver reports no total
        if unified:
            free = host_free
        else:
            free = free * MIB if free is not None else None
        out["gpus"].append(
            {"index": int(f[0]), "uuid": f[1], "name": f[2], "unified": unified, "free": free}
        )
    for line in a.out.decode("utf-8", "replace").splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 3 and f[0].isdigit():
            used = _num(f[2])
            out["apps"].append({"pid": int(f[0]), "uuid": f[1], "used": used * MIB if used else 0})
    if r.rc != 0:
        out["error"] = runner.first_line(r.err or r.out) or "nvidia-smi failed"
    return out


def after_pid(after: Optional[str]) -> Any:
    if not after:
        return None
    try:
        with open(os.path.join(after, "run.json"), encoding="utf-8") as f:
            return json.load(f).get("pid")
    except (OSError, ValueError, AttributeError):
        return None


def check(checks: List[Check], name: str, ok: bool, message: str) -> bool:
    """One pre-flight check's verdict, added to `checks`; returns `ok`."""
    checks.append({"name": name, "ok": bool(ok), "message": message})
    return ok


def check_gpus(checks: List[Check], config: Dict[str, Any], gpus: Dict[str, Any]) -> bool:
    """`gpus = N` against the GPUs this host has: N of them (GPUs 0..N-1), or, without a GPU,
    one process on the CPU (several only where FLEETDECK_TRAIN_CPU_PROCESSES=1 asks the
    trainer for CPU processes, as the tests do)."""
    want = int(config.get("gpus", 1))
    have = len(gpus["gpus"])
    if have:
        return check(
            checks,
            "gpus",
            want <= have,
            "the run takes {} of this host's {} GPU{} (GPU {})".format(
                want,
                have,
                "" if have == 1 else "s",
                ", ".join(str(g["index"]) for g in gpus["gpus"][:want]),
            )
            if want <= have
            else "RUN.toml asks for gpus = {} and this host has {} GPU{}; set gpus to {} or fewer".format(
                want, have, "" if have == 1 else "s", have
            ),
        )
    why = " ({})".format(gpus["error"]) if gpus["error"] else ""
    if want == 1:
        return check(
            checks,
            "gpus",
            True,
            f"no GPU on this host{why}: the run trains in one process on the CPU",
        )
    if os.environ.get("FLEETDECK_TRAIN_CPU_PROCESSES") == "1":
        return check(
            checks,
            "gpus",
            True,
            f"no GPU on this host{why}: the run trains in {want} processes on the "
            "CPU (FLEETDECK_TRAIN_CPU_PROCESSES=1)",
        )
    return check(
        checks,
        "gpus",
        False,
        f"RUN.toml asks for gpus = {want} and this host has no GPU{why}; "
        "set gpus = 1 to train on its CPU",
    )


def check_memory(
    checks: List[Check],
    config: Dict[str, Any],
    gpus: Dict[str, Any],
    est: Dict[str, Any],
    after: Optional[str],
) -> Optional[bool]:
    """GPU memory (or, without a GPU, system memory) against the estimate."""
    need, why = est["memory_bytes"], parts_text(est["memory_parts"])
    if not est["params"]:
        why += " (model size unknown: weights not counted)"
    if not gpus["gpus"]:
        avail = mem_available()
        note = "no GPU on this host%s: the run trains on CPU" % (
            " ({})".format(gpus["error"]) if gpus["error"] else ""
        )
        if avail is None:
            return check(checks, "memory", True, f"{note}; memory not checked (no /proc/meminfo)")
        return check(
            checks,
            "memory",
            avail >= need,
            f"{note} and needs about {units.size(need)} ({why}); {units.size(avail)} available",
        )
    want = int(config.get("gpus", 1))
    if len(gpus["gpus"]) < want:
        return check(
            checks,
            "memory",
            False,
            f"the run asks for {want} GPUs and this host has {len(gpus['gpus'])}",
        )
    prev = after_pid(after)
    shared = [g for g in gpus["gpus"][:want] if g["unified"]]
    if shared:
        check_unified_memory(checks, shared, gpus["apps"], prev, need, why)
    for g in gpus["gpus"][:want]:
        if g["unified"]:
            continue
        free = g["free"]
        if free is None:
            check(
                checks,
                "memory",
                True,
                f"GPU {g['index']} reports no free memory figure; not checked",
            )
            continue
        freed = sum(p["used"] for p in gpus["apps"] if p["pid"] == prev and p["uuid"] == g["uuid"])
        total = free + freed
        extra = f" ({units.size(freed)} of it held now by the run it waits for)" if freed else ""
        check(
            checks,
            "memory",
            total >= need,
            f"GPU {g['index']} has {units.size(total)} free{extra}; "
            f"the run needs about {units.size(need)} ({why})",
        )
    return None


def check_unified_memory(
    checks: List[Check],
    shared: List[Dict[str, Any]],
    apps: List[Dict[str, Any]],
    prev: Any,
    need: int,
    why: str,
) -> Optional[bool]:
    """GPUs with no memory of their own (unified memory, GB10) share the host's: one check of
    every process the run starts on them against MemAvailable, read once, each process's weights
    counted once (its host side and its GPU side are the same memory)."""
    names = "GPU{} {}".format(
        "s" if len(shared) > 1 else "", ", ".join(str(g["index"]) for g in shared)
    )
    avail = shared[0]["free"]
    if avail is None:
        return check(
            checks,
            "memory",
            True,
            f"{names} (unified memory): the host reports no MemAvailable; not checked",
        )
    uuids = {g["uuid"] for g in shared}
    freed = sum(p["used"] for p in apps if p["pid"] == prev and p["uuid"] in uuids)
    extra = f", {units.size(freed)} of it held now by the run it waits for" if freed else ""
    total = need * len(shared)
    each = f"{len(shared)} processes x " if len(shared) > 1 else ""
    check(
        checks,
        "memory",
        avail + freed >= total,
        f"{names} {'share' if len(shared) > 1 else 'shares'} the host's memory (unified memory): "
        f"{units.size(avail + freed)} available (MemAvailable{extra}); the run needs about {units.size(total)} "
        f"({each}{why}; weights counted once, host and GPU being one memory)",
    )
    return None


def check_disk(checks: List[Check], output: str, est: Dict[str, Any]) -> Optional[bool]:
    """Free space on the output's filesystem against checkpoints + adapter + logs."""
    probe = output
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError as e:
        return check(checks, "disk", False, f"cannot read free space at {probe}: {e}")
    free = st.f_bavail * st.f_frsize
    need = est["disk_bytes"]
    check(
        checks,
        "disk",
        free >= need,
        f"the run writes about {units.size(need)} ({est['saves']} saves x {units.size(est['checkpoint_bytes'])} "
        f"per checkpoint + {units.size(est['adapter_bytes'])} adapter + logs, for ~{est['steps']} steps); "
        f"{units.size(free)} free at {probe}",
    )
    return None
