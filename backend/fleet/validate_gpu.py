"""One GPU of a host's answer checked into a `Gpu`: its memory and processes, its health
figures (clocks, power, temperatures, PCIe link, ECC and row remaps, Xid errors) each bounded
on its own, so a figure the driver got wrong is None with a warning and the card stays."""

from __future__ import annotations

from typing import Any

from fleetdeck.backend.fleet.models import Gpu, GpuEcc, GpuPcie, GpuProcess, Xid
from fleetdeck.backend.fleet.validate_fields import (
    MAX_ITEMS,
    MAX_TEXT,
    BadField,
    Item,
    as_count,
    as_figure,
    as_flag,
    as_label,
    as_text,
    as_whole,
    as_words,
    described,
    sub_fields,
)

PCIE_FIELDS = {
    "gen": (as_whole, 0, 64),
    "gen_max": (as_whole, 0, 64),
    "width": (as_whole, 0, 1024),
    "width_max": (as_whole, 0, 1024),
    "tx_bytes_s": (as_figure, 0.0),
    "rx_bytes_s": (as_figure, 0.0),
    "sampled_at": (as_figure, 0.0),
}
ECC_FIELDS = {
    "mode": (as_label, True, 32),
    "corrected": (as_count,),
    "uncorrected": (as_count,),
    "corrected_aggregate": (as_count,),
    "uncorrected_aggregate": (as_count,),
    "pending_retirement": (as_flag,),
    "remapped_correctable": (as_count,),
    "remapped_uncorrectable": (as_count,),
    "remap_failure": (as_flag,),
}


def _xids(v: Any, marks: list[str]) -> tuple[Xid, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        marks.append(f"xid: not a list ({described(v)})")
        return None
    out = []
    for x in v[:64]:
        try:
            if not isinstance(x, dict):
                raise BadField("xid", f"not an object ({described(x)})")
            t, code = (
                as_figure(x.get("time"), "xid.time", 0.0),
                as_count(x.get("code"), "xid.code", 1_000_000),
            )
            if t is None or code is None:
                raise BadField("xid", "no time or code")
            out.append(Xid(time=t, code=code))
        except BadField as e:
            marks.append(str(e))
    return tuple(out)


def gpu_from_json(d: Any, i: int, marks: list[str]) -> Gpu:
    """GPU number `i` of an answer; what is wrong with a figure goes to `marks`."""
    it = Item(d, "gpu")
    procs = []
    items = d.get("processes") or ()
    for p in items[: MAX_ITEMS["processes"]] if isinstance(items, list) else ():
        try:
            pi = Item(p, "process")
            procs.append(
                GpuProcess(
                    pid=as_count(p.get("pid", 0), "processes.pid", 2**31) or 0,
                    user=as_text(p.get("user", ""), "processes.user"),  # type: ignore[arg-type]
                    used_mib=pi.soft(as_figure, "used_mib", 0.0) or 0.0,
                    command=as_text(p.get("command", ""), "processes.command", limit=4 * MAX_TEXT),  # type: ignore[arg-type]
                    sm_pct=pi.soft(as_figure, "sm_pct", 0.0, 100.0),
                    memory_util_pct=pi.soft(as_figure, "memory_util_pct", 0.0, 100.0),
                )
            )
            marks.extend(f"processes.{m}" for m in pi.marks)
        except BadField as e:
            marks.append(f"a process left out: {e}")
    util = it.soft(as_figure, "utilization_pct", 0.0, 100.0)
    gpu = Gpu(
        index=as_count(d.get("index", i), "index", 1023),  # type: ignore[arg-type]
        name=as_label(d.get("name", ""), "name"),  # type: ignore[arg-type]
        uuid=as_label(d.get("uuid", ""), "uuid", limit=128),  # type: ignore[arg-type]
        unified_memory=d.get("unified_memory") is True,
        memory_total_mib=it.soft(as_figure, "memory_total_mib", 0.0),
        memory_used_mib=it.soft(as_figure, "memory_used_mib", 0.0),
        utilization_pct=util,
        processes=tuple(procs),
        memory_util_pct=it.soft(as_figure, "memory_util_pct", 0.0, 100.0),
        temperature_c=it.soft(as_whole, "temperature_c", -100, 300),
        temperature_slowdown_c=it.soft(as_whole, "temperature_slowdown_c", -100, 300),
        temperature_shutdown_c=it.soft(as_whole, "temperature_shutdown_c", -100, 300),
        power_w=it.soft(as_figure, "power_w", 0.0, 1e5),
        power_limit_w=it.soft(as_figure, "power_limit_w", 0.0, 1e5),
        sm_clock_mhz=it.soft(as_whole, "sm_clock_mhz", 0, 10**6),
        sm_clock_max_mhz=it.soft(as_whole, "sm_clock_max_mhz", 0, 10**6),
        mem_clock_mhz=it.soft(as_whole, "mem_clock_mhz", 0, 10**6),
        mem_clock_max_mhz=it.soft(as_whole, "mem_clock_max_mhz", 0, 10**6),
        throttle_reasons=it.soft(as_words, "throttle_reasons"),
        fan_pct=it.soft(as_whole, "fan_pct", 0, 1000),
        pcie=GpuPcie(**sub_fields(d, "pcie", PCIE_FIELDS, it.marks)),
        ecc=GpuEcc(**sub_fields(d, "ecc", ECC_FIELDS, it.marks)),
        persistence_mode=it.soft(as_flag, "persistence_mode"),
        compute_mode=it.soft(as_label, "compute_mode", True, 32),
        mig_mode=it.soft(as_flag, "mig_mode"),
        xid=_xids(d.get("xid"), it.marks),
        lost=it.soft(as_label, "lost", True, 200),
    )
    marks.extend(it.marks)
    return gpu


__all__ = ["ECC_FIELDS", "PCIE_FIELDS", "gpu_from_json"]
