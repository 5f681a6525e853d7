"""The per-GPU health families of /metrics: one per figure of a card, in base units, each
beside the dcgm-exporter field that measures the same figure (docs/probe.md, "In /metrics")."""

from __future__ import annotations

from typing import Any

from fleetdeck.backend.fleet.validate_fields import as_figure, as_flag, as_whole
from fleetdeck.backend.fleet.validate_gpu import declared_figures
from fleetdeck.backend.monitor.metrics.values import Family, gauge, label, sample

#: the per-GPU health families, one per figure: (figure: a Gpu attribute, `pcie.gen` for a
#: nested one; our name; help; the scale to base units; dcgm-exporter's field for the same
#: figure, docs/probe.md ("In /metrics") lists them side by side)
GPU_FIGURES = (
    (
        "memory_util_pct",
        "gpu_memory_utilization_percent",
        "memory controller busy",
        1,
        "DCGM_FI_DEV_MEM_COPY_UTIL",
    ),
    ("temperature_c", "gpu_temperature_celsius", "GPU temperature", 1, "DCGM_FI_DEV_GPU_TEMP"),
    (
        "temperature_slowdown_c",
        "gpu_slowdown_temperature_celsius",
        "temperature at which the GPU slows down",
        1,
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
    ),
    (
        "temperature_shutdown_c",
        "gpu_shutdown_temperature_celsius",
        "temperature at which the GPU shuts down",
        1,
        "DCGM_FI_DEV_SHUTDOWN_TEMP",
    ),
    ("power_w", "gpu_power_watts", "power draw", 1, "DCGM_FI_DEV_POWER_USAGE"),
    (
        "power_limit_w",
        "gpu_power_limit_watts",
        "enforced power limit",
        1,
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    ),
    ("sm_clock_mhz", "gpu_sm_clock_hertz", "SM clock", 1e6, "DCGM_FI_DEV_SM_CLOCK"),
    (
        "sm_clock_max_mhz",
        "gpu_sm_clock_max_hertz",
        "SM clock's maximum",
        1e6,
        "DCGM_FI_DEV_MAX_SM_CLOCK",
    ),
    ("mem_clock_mhz", "gpu_memory_clock_hertz", "memory clock", 1e6, "DCGM_FI_DEV_MEM_CLOCK"),
    (
        "mem_clock_max_mhz",
        "gpu_memory_clock_max_hertz",
        "memory clock's maximum",
        1e6,
        "DCGM_FI_DEV_MAX_MEM_CLOCK",
    ),
    ("fan_pct", "gpu_fan_percent", "fan speed", 1, "DCGM_FI_DEV_FAN_SPEED"),
    (
        "pcie.gen",
        "gpu_pcie_link_generation",
        "PCIe link generation",
        1,
        "DCGM_FI_DEV_PCIE_LINK_GEN",
    ),
    (
        "pcie.width",
        "gpu_pcie_link_width",
        "PCIe link width (lanes)",
        1,
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    ),
    (
        "pcie.tx_bytes_s",
        "gpu_pcie_tx_bytes_per_second",
        "PCIe transmit throughput (a sample)",
        1,
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    ),
    (
        "pcie.rx_bytes_s",
        "gpu_pcie_rx_bytes_per_second",
        "PCIe receive throughput (a sample)",
        1,
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    ),
    (
        "ecc.pending_retirement",
        "gpu_ecc_pending_retirement",
        "1 when rows or pages wait for a reset",
        1,
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
    ),
    (
        "ecc.remap_failure",
        "gpu_row_remap_failure",
        "1 when a row remap failed",
        1,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ),
    ("ecc.mode", "gpu_ecc_mode", "1 when ECC is enabled", 1, "DCGM_FI_DEV_ECC_CURRENT"),
    (
        "persistence_mode",
        "gpu_persistence_mode",
        "1 when persistence mode is on",
        1,
        "DCGM_FI_DEV_PERSISTENCE_MODE",
    ),
    ("mig_mode", "gpu_mig_mode", "1 when MIG is on", 1, "DCGM_FI_DEV_MIG_MODE"),
)
GPU = ["host", "gpu", "uuid"]
#: the families with a label of their own: key -> (our name, help, extra label, dcgm-exporter's)
GPU_LABELLED = {
    "throttle": (
        "gpu_throttle_reason",
        "1 for each clock event (throttle) reason active",
        "reason",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    ),
    "ecc_corrected": (
        "gpu_ecc_corrected_errors",
        "corrected ECC errors",
        "counter",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    ),
    "ecc_uncorrected": (
        "gpu_ecc_uncorrected_errors",
        "uncorrected ECC errors",
        "counter",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    ),
    "remapped": (
        "gpu_remapped_rows",
        "rows remapped",
        "cause",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ),
    "xid": (
        "gpu_xid_errors",
        "Xid errors the probe read in the last hour",
        "code",
        "DCGM_FI_DEV_XID_ERRORS",
    ),
    "compute": (
        "gpu_compute_mode",
        "1 for the GPU's compute mode",
        "mode",
        "DCGM_FI_DEV_COMPUTE_MODE",
    ),
}


#: the declared numbers and flags exported by a family other than GPU_FIGURES: the memory and
#: utilisation families of metrics/export.py, and the labelled ones above (GPU_LABELLED)
ELSEWHERE = frozenset(
    {
        "memory_total_mib",
        "memory_used_mib",
        "utilization_pct",
        "unified_memory",
        "ecc.corrected",
        "ecc.uncorrected",
        "ecc.corrected_aggregate",
        "ecc.uncorrected_aggregate",
        "ecc.remapped_correctable",
        "ecc.remapped_uncorrectable",
    }
)
#: the declared numbers and flags left out on purpose: the PCIe maxima and the time of the
#: throughput sample are read in the Host view only (the card's index is a label)
NOT_EXPORTED = frozenset({"pcie.gen_max", "pcie.width_max", "pcie.sampled_at"})

#: the prefix of the families of the declared figures no family above exports (`declared`)
DECLARED = "declared:"


def declared() -> list[str]:
    """The numbers and flags the probe declares for a card (backend/host/probe/wire.py) that
    neither GPU_FIGURES nor another family exports, nor NOT_EXPORTED leaves out, by path: each
    is exported as it was checked, in its declared unit, as `fleetdeck_gpu_<path>` (`pcie.x`
    as `gpu_pcie_x`), whether the `Gpu` model names it or keeps it in `Gpu.extra`."""
    own = {key for key, *_ in GPU_FIGURES} | ELSEWHERE | NOT_EXPORTED
    return [
        p for p, fn in declared_figures() if fn in (as_whole, as_figure, as_flag) and p not in own
    ]


def gpu_families() -> dict[str, Family]:
    """A fresh, empty family for each GPU health figure, by its key."""
    fams = {key: gauge(name, doc, GPU) for key, name, doc, _scale, _dcgm in GPU_FIGURES}
    fams.update(
        {
            key: gauge(name, doc, [*GPU, extra])
            for key, (name, doc, extra, _dcgm) in GPU_LABELLED.items()
        }
    )
    for path in declared():
        fams[DECLARED + path] = gauge(
            "gpu_" + path.replace(".", "_"),
            f"the GPU's {path} as the probe declares it (backend/host/probe/wire.py)",
            GPU,
        )
    return fams


def _figure(g: Any, key: str) -> Any:
    part, _, field = key.partition(".")
    v = getattr(getattr(g, part), field) if field else getattr(g, part)
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if key == "ecc.mode":
        return None if v is None else 1.0 if v == "enabled" else 0.0
    return v


def gpu_health(m: dict[str, Any], lab: list[str], g: Any) -> None:
    """Add card `g`\'s health figures (labels `lab`: host, index, uuid) to the families `m`."""
    ready = [label(x) for x in lab]  # the card's labels, made once for its thirty-odd series
    for key, _name, _doc, scale, _dcgm in GPU_FIGURES:
        v = sample(_figure(g, key))
        m[key].add_labelled(ready, None if v is None else v * scale)
    for r in g.throttle_reasons or ():
        m["throttle"].add_labelled([*ready, label(r)], 1.0)
    e = g.ecc
    for counter, cor, unc in (
        ("volatile", e.corrected, e.uncorrected),
        ("aggregate", e.corrected_aggregate, e.uncorrected_aggregate),
    ):
        m["ecc_corrected"].add_labelled([*ready, counter], cor)
        m["ecc_uncorrected"].add_labelled([*ready, counter], unc)
    m["remapped"].add_labelled([*ready, "correctable"], e.remapped_correctable)
    m["remapped"].add_labelled([*ready, "uncorrectable"], e.remapped_uncorrectable)
    codes: dict[int, int] = {}
    for x in g.xid or ():
        codes[x.code] = codes.get(x.code, 0) + 1
    for code, n in sorted(codes.items()):
        m["xid"].add_labelled([*ready, str(code)], n)
    if g.compute_mode is not None:
        m["compute"].add_labelled([*ready, label(g.compute_mode)], 1.0)
    for key, fam in m.items():
        if key.startswith(DECLARED):
            v = g.figure(key[len(DECLARED) :])
            fam.add_labelled(ready, (1.0 if v else 0.0) if isinstance(v, bool) else v)


__all__ = [
    "DECLARED",
    "ELSEWHERE",
    "GPU",
    "GPU_FIGURES",
    "GPU_LABELLED",
    "NOT_EXPORTED",
    "declared",
    "gpu_families",
    "gpu_health",
]
