"""The probe's GPU section: NVML, else nvidia-smi, else none (with the reason)."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import csv
import re
import shutil
import time

from fleetdeck.backend.host.probe.common import (
    STATE,
    Procs,
    meminfo,
    read_text,
    run_text,
    user_name,
)
from fleetdeck.backend.host.probe.gpu_health import throttle_words
from fleetdeck.backend.host.probe.nvml import Nvml

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from typing import Any

    from fleetdeck.backend.host.probe.wire import GpuHealth, GpuProcessRecord, GpuRecord


# -- GPUs ---------------------------------------------------------------------------------------
def _blank_health() -> GpuHealth:
    """The health fields when no source names them (all unknown)."""
    return {
        "memory_util_pct": None,
        "temperature_c": None,
        "temperature_slowdown_c": None,
        "temperature_shutdown_c": None,
        "power_w": None,
        "power_limit_w": None,
        "sm_clock_mhz": None,
        "sm_clock_max_mhz": None,
        "mem_clock_mhz": None,
        "mem_clock_max_mhz": None,
        "throttle_reasons": None,
        "fan_pct": None,
        "pcie": {
            "gen": None,
            "gen_max": None,
            "width": None,
            "width_max": None,
            "tx_bytes_s": None,
            "rx_bytes_s": None,
            "sampled_at": None,
        },
        "ecc": {
            "mode": None,
            "corrected": None,
            "uncorrected": None,
            "corrected_aggregate": None,
            "uncorrected_aggregate": None,
            "pending_retirement": None,
            "remapped_correctable": None,
            "remapped_uncorrectable": None,
            "remap_failure": None,
        },
        "persistence_mode": None,
        "compute_mode": None,
        "mig_mode": None,
        "xid": None,
    }


def _smi_num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


SMI_BASE = ("index", "name", "uuid", "memory.total", "memory.used", "utilization.gpu")
#: the health fields nvidia-smi's --query-gpu names, each by the names drivers have used for it
#: (the first one this host's nvidia-smi lists is asked; one it lists none of stays null)
SMI_HEALTH = (
    ("memory_util_pct", ("utilization.memory",)),
    ("temperature_c", ("temperature.gpu",)),
    ("power_w", ("power.draw",)),
    ("power_limit_w", ("enforced.power.limit", "power.limit")),
    ("sm_clock_mhz", ("clocks.sm", "clocks.current.sm")),
    ("sm_clock_max_mhz", ("clocks.max.sm",)),
    ("mem_clock_mhz", ("clocks.mem", "clocks.current.memory")),
    ("mem_clock_max_mhz", ("clocks.max.mem", "clocks.max.memory")),
    ("throttle", ("clocks_event_reasons.active", "clocks_throttle_reasons.active")),
    ("fan_pct", ("fan.speed",)),
    ("pcie.gen", ("pcie.link.gen.gpucurrent", "pcie.link.gen.current")),
    ("pcie.gen_max", ("pcie.link.gen.max",)),
    ("pcie.width", ("pcie.link.width.current",)),
    ("pcie.width_max", ("pcie.link.width.max",)),
    ("ecc.mode", ("ecc.mode.current",)),
    ("ecc.corrected", ("ecc.errors.corrected.volatile.total",)),
    ("ecc.uncorrected", ("ecc.errors.uncorrected.volatile.total",)),
    ("ecc.corrected_aggregate", ("ecc.errors.corrected.aggregate.total",)),
    ("ecc.uncorrected_aggregate", ("ecc.errors.uncorrected.aggregate.total",)),
    ("retired_pending", ("retired_pages.pending",)),
    ("remap_pending", ("remapped_rows.pending",)),
    ("ecc.remapped_correctable", ("remapped_rows.correctable",)),
    ("ecc.remapped_uncorrectable", ("remapped_rows.uncorrectable",)),
    ("remap_failure", ("remapped_rows.failure",)),
    ("persistence_mode", ("persistence_mode",)),
    ("compute_mode", ("compute_mode",)),
    ("mig_mode", ("mig.mode.current",)),
)
FLAGS = {"enabled": True, "yes": True, "disabled": False, "no": False}


def _smi_fields() -> list[tuple[str, str]]:
    """The health fields to ask this host's nvidia-smi for, [(key, name)], from its own
    `--help-query-gpu` list (asked once: a name it does not know fails the whole query)."""
    if STATE.get("smi_fields") is None:
        rc, out, _err = run_text(["nvidia-smi", "--help-query-gpu"])
        known = set(re.findall(r'"([A-Za-z0-9_.]+)"', out or "")) if rc == 0 else set()
        STATE["smi_fields"] = [
            (k, next(n for n in names if n in known))
            for k, names in SMI_HEALTH
            if any(n in known for n in names)
        ]
    return STATE["smi_fields"]


def _smi_health(fields: list[tuple[str, str]], cells: list[str]) -> dict:
    """The health dict from one --query-gpu row's extra cells (after SMI_BASE)."""
    h: dict[str, Any] = dict(_blank_health())  # filled by names read from a table
    got = {}
    for (key, _name), raw in zip(fields, cells):  # noqa: B905 (strict= is 3.10+; hosts run 3.8)
        v = raw.strip()
        low = v.lower()
        if not v or v.startswith("[") or low == "n/a":
            continue
        got[key] = v
    num = {k: _smi_num(v) for k, v in got.items()}
    whole = {
        k: None if v is None else int(v) for k, v in num.items() if v is None or v.is_integer()
    }
    for key in (
        "memory_util_pct",
        "temperature_c",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "mem_clock_mhz",
        "mem_clock_max_mhz",
        "fan_pct",
    ):
        h[key] = whole.get(key)
    for key in ("power_w", "power_limit_w"):
        h[key] = num.get(key)
    for key in (
        "pcie.gen",
        "pcie.gen_max",
        "pcie.width",
        "pcie.width_max",
        "ecc.corrected",
        "ecc.uncorrected",
        "ecc.corrected_aggregate",
        "ecc.uncorrected_aggregate",
        "ecc.remapped_correctable",
        "ecc.remapped_uncorrectable",
    ):
        part, _, field = key.partition(".")
        h[part][field] = whole.get(key)
    if "throttle" in got:
        try:
            h["throttle_reasons"] = throttle_words(int(got["throttle"], 16))
        except ValueError:
            pass
    flag = {k: FLAGS.get(v.lower()) for k, v in got.items()}
    if "ecc.mode" in got and flag["ecc.mode"] is not None:
        h["ecc"]["mode"] = "enabled" if flag["ecc.mode"] else "disabled"
    pending = [flag[k] for k in ("retired_pending", "remap_pending") if flag.get(k) is not None]
    h["ecc"]["pending_retirement"] = any(pending) if pending else None
    h["ecc"]["remap_failure"] = flag.get("remap_failure")
    h["persistence_mode"], h["mig_mode"] = flag.get("persistence_mode"), flag.get("mig_mode")
    if "compute_mode" in got:
        h["compute_mode"] = got["compute_mode"].lower().replace("_", "-").replace(" ", "-")
    return h


def _smi() -> list[tuple] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    fields = _smi_fields()
    q = ",".join(SMI_BASE + tuple(n for _k, n in fields))
    rc, out, err = run_text(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits"])
    if rc is None:
        return None
    if rc != 0:
        raise OSError(
            "nvidia-smi failed: {}".format(
                ((err or out).strip().splitlines() or [f"exit {rc}"])[-1]
            )
        )
    rc2, apps, err2 = run_text(
        [
            "nvidia-smi",
            "--query-compute-apps=gpu_uuid,pid,used_memory",
            "--format=csv,noheader,nounits",
        ]
    )
    per = {}  # type: dict
    unknown = {
        "sm_pct": None,
        "memory_util_pct": None,
    }  # nvidia-smi's query has no per-process figure
    for row in csv.reader((apps if rc2 == 0 else "").splitlines(), skipinitialspace=True):
        if len(row) >= 3 and row[1].strip().isdigit():
            mib = _smi_num(row[2])
            per.setdefault(row[0].strip(), []).append(
                (int(row[1]), None if not mib else mib * 2**20, unknown)
            )
    res = []
    for row in csv.reader(out.splitlines(), skipinitialspace=True):
        if len(row) < 6:
            continue
        tot, used, util = _smi_num(row[3]), _smi_num(row[4]), _smi_num(row[5])
        res.append(
            (
                int(row[0]),
                row[1].strip(),
                row[2].strip(),
                None if tot is None else tot * 2**20,
                None if used is None else used * 2**20,
                util,
                per.get(row[2].strip(), []),
                _smi_health(fields, row[6:]),
            )
        )
    return res


def _rss(pid: int) -> int:
    try:
        for line in read_text(f"/proc/{pid}/status").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def gpus(mode: str, procs: Procs, warnings: list[str]) -> tuple[list[GpuRecord], str | None]:
    """(gpu list, source): NVML, else nvidia-smi, else none (with a warning saying why)."""
    raw, source, why = None, None, []
    if mode in ("auto", "nvml"):
        try:
            if STATE["nvml"] is None and time.time() >= STATE["nvml_retry"]:
                STATE["nvml"] = Nvml(resident=STATE.get("resident", False))
            if STATE["nvml"] is not None:
                raw, source = STATE["nvml"].read(), "nvml"
                warnings.extend(STATE["nvml"].notes)
            else:
                why.append(STATE["nvml_error"])
        except Exception as e:  # noqa: BLE001 - no library, no driver, an old driver: say which
            STATE["nvml"], STATE["nvml_error"] = None, f"NVML: {e}"
            STATE["nvml_retry"] = time.time() + 60  # a host without the driver stays without it
            why.append(STATE["nvml_error"])
    if raw is None and mode in ("auto", "nvidia-smi"):
        try:
            raw = _smi()
            if raw is None:
                why.append("nvidia-smi not found")
            else:
                source = "nvidia-smi"
        except OSError as e:
            why.append(str(e))
    if raw is None:
        if mode != "none":
            no_driver = "nvidia-smi not found" in why and all(
                "cannot open shared object" in w
                or "Library Not Found" in w
                or w == "nvidia-smi not found"
                for w in why
                if w
            )
            # a CPU-only host is normal: say so plainly; anything else keeps the driver's words
            warnings.append(
                "no NVIDIA driver on this host (no libnvidia-ml, no nvidia-smi): no GPUs"
                if no_driver
                else "no GPUs reported: " + "; ".join(w for w in why if w)
            )
        return [], None
    mem = None
    out: list[GpuRecord] = []
    for index, name, uuid, total, used, util, plist, health in raw:
        if (
            "lost" in health
        ):  # the driver lost the card: who it is and its Xids, every figure unknown
            d: GpuRecord = {
                "index": index,
                "name": name,
                "uuid": uuid,
                "unified_memory": False,
                "memory_total_mib": None,
                "memory_used_mib": None,
                "utilization_pct": None,
                "processes": [],
            }
            d.update(_blank_health())
            d["lost"], d["xid"] = health["lost"], health["xid"]
            out.append(d)
            continue
        unified = total is None
        if unified:  # GB10-style: the driver has no memory figures; the system's are the GPU's
            mem = mem or meminfo()
            total, used = mem["MemTotal"], mem["MemTotal"] - mem.get("MemAvailable", 0)
        ps: list[GpuProcessRecord] = []
        for pid, b, extra in plist:
            uid = procs.uid(pid)
            ps.append(
                {
                    "pid": pid,
                    "user": "" if uid is None else user_name(uid),
                    "used_mib": round((b if b is not None else _rss(pid)) / 2**20, 1),
                    "command": procs.command(pid),
                    "sm_pct": extra["sm_pct"],
                    "memory_util_pct": extra["memory_util_pct"],
                }
            )
        d = {
            "index": index,
            "name": name,
            "uuid": uuid,
            "unified_memory": unified,
            "memory_total_mib": round(total / 2**20, 1),
            "memory_used_mib": round(used / 2**20, 1),
            "utilization_pct": util,
            "processes": ps,
        }
        d.update(health)
        out.append(d)
    return out, source
