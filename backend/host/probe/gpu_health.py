"""The probe's GPU health fields, read through an NVML session (`probe/nvml`): temperature
and its thresholds, power, clocks, throttle reasons, fan, PCIe, ECC and row remapping, and the
modes, each asked as often as its cost allows (docs/probe.md, "GPU health").
"""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

from fleetdeck.backend.host.probe.sampler import SAMPLE_MAX_AGE_S

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from typing import Any

    from fleetdeck.backend.host.probe.wire import GpuHealth

#: ECC mode, persistence, compute and MIG mode and the PCIe maxima are asked this often
RARE_S = 300.0

#: clock event ("throttle") reason bits, nvml.h's nvmlClocksEventReason*, as words
THROTTLE_BITS = (
    (0x1, "idle"),
    (0x2, "applications-clocks-setting"),
    (0x4, "sw-power-cap"),
    (0x8, "hw-slowdown"),
    (0x10, "sync-boost"),
    (0x20, "sw-thermal-slowdown"),
    (0x40, "hw-thermal-slowdown"),
    (0x80, "hw-power-brake-slowdown"),
    (0x100, "display-clock-setting"),
)
COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}


def throttle_words(mask: int | None) -> list[str] | None:
    """The reasons set in a clock-event bitmask, as words ([] for none, None for unknown);
    a bit nvml.h does not name is given as its hex value."""
    if mask is None:
        return None
    mask = int(mask)
    out = [w for bit, w in THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(b for b, _ in THROTTLE_BITS)
    bit = 1
    while rest and bit <= rest:
        if rest & bit:
            out.append("0x%x" % bit)
        bit <<= 1
    return out


def health(n: Any, i: int, h: Any, now: float) -> GpuHealth:
    """The contract's health fields of device `i` (handle `h`) of NVML session `n` (an
    `nvml.Nvml`, which imports this module), each query guarded by the session (docs/probe.md,
    "GPU health"); the session adds `memory_util_pct` from its utilisation query."""
    nv, ask, once = n.nv, n.ask, n.once
    power = ask(i, "power", nv.nvmlDeviceGetPowerUsage, h)
    limit = ask(i, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
    reasons = ask(i, "reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, h)
    if reasons is None and (i, "reasons") in n._never:  # a driver before 535
        reasons = ask(i, "reasons_old", nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    rare = _rare_fields(n, i, h, now)
    vol, agg = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
    cor, unc = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    ecc_count = nv.nvmlDeviceGetTotalEccErrors
    remap = ask(i, "remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
    retired = ask(i, "retired_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    flags = [bool(x) for x in (remap[2] if remap else None, retired) if x is not None]
    tx_rx = n.sampler.pcie.get(i) if n.sampler is not None else None
    if tx_rx is not None and now - tx_rx[2] >= SAMPLE_MAX_AGE_S:
        tx_rx = None  # too old to be this poll's rate
    return {
        "temperature_c": ask(i, "temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        "temperature_slowdown_c": once(
            i,
            "slowdown",
            nv.nvmlDeviceGetTemperatureThreshold,
            h,
            nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        ),
        "temperature_shutdown_c": once(
            i,
            "shutdown",
            nv.nvmlDeviceGetTemperatureThreshold,
            h,
            nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        ),
        "power_w": None if power is None else round(power / 1000.0, 1),
        "power_limit_w": None if limit is None else round(limit / 1000.0, 1),
        "sm_clock_mhz": ask(i, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        "sm_clock_max_mhz": once(
            i, "sm_clock_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM
        ),
        "mem_clock_mhz": ask(i, "mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
        "mem_clock_max_mhz": once(
            i, "mem_clock_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM
        ),
        "throttle_reasons": throttle_words(reasons),
        "fan_pct": ask(i, "fan", nv.nvmlDeviceGetFanSpeed, h),
        "pcie": {
            "gen": ask(i, "pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
            "gen_max": rare["pcie_gen_max"],
            "width": rare["pcie_width"],
            "width_max": rare["pcie_width_max"],
            "tx_bytes_s": tx_rx[0] if tx_rx is not None else None,
            "rx_bytes_s": tx_rx[1] if tx_rx is not None else None,
            "sampled_at": round(tx_rx[2], 3) if tx_rx is not None else None,
        },
        "ecc": {
            "mode": rare["ecc_mode"],
            "corrected": ask(i, "ecc_cv", ecc_count, h, cor, vol),
            "uncorrected": ask(i, "ecc_uv", ecc_count, h, unc, vol),
            "corrected_aggregate": ask(i, "ecc_ca", ecc_count, h, cor, agg),
            "uncorrected_aggregate": ask(i, "ecc_ua", ecc_count, h, unc, agg),
            "pending_retirement": any(flags) if flags else None,
            "remapped_correctable": remap[0] if remap else None,
            "remapped_uncorrectable": remap[1] if remap else None,
            "remap_failure": bool(remap[3]) if remap else None,
        },
        "persistence_mode": rare["persistence_mode"],
        "compute_mode": rare["compute_mode"],
        "mig_mode": rare["mig_mode"],
        "xid": n.xid_list(i),
    }


def _rare_fields(n: Any, i: int, h: Any, now: float) -> dict[str, Any]:
    """The fields that change only on a reboot or an operator's command, asked every RARE_S."""
    got = n._rare.get(i)
    if got is not None and now - got[0] < RARE_S:
        return got[1]
    nv, ask = n.nv, n.ask
    ecc = ask(i, "ecc_mode", nv.nvmlDeviceGetEccMode, h)
    pers = ask(i, "persistence", nv.nvmlDeviceGetPersistenceMode, h)
    comp = ask(i, "compute_mode", nv.nvmlDeviceGetComputeMode, h)
    mig = ask(i, "mig_mode", nv.nvmlDeviceGetMigMode, h)
    f = {
        "ecc_mode": None if ecc is None else ("enabled" if ecc[0] else "disabled"),
        "persistence_mode": None if pers is None else bool(pers),
        "compute_mode": None if comp is None else COMPUTE_MODES.get(comp, str(comp)),
        "mig_mode": None if mig is None else bool(mig[0]),
        "pcie_width": ask(i, "pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        "pcie_gen_max": ask(i, "pcie_gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "pcie_width_max": ask(i, "pcie_width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, h),
    }
    n._rare[i] = (now, f)
    return f
