"""The GPU health rules, judged on each poll with the other rules (`alerts.AlertEngine`):

- gpu-throttled: a hardware or thermal slowdown (`gpu_health.SLOWDOWN`) held for its `for`
  (60 s by default); a power cap doing its job is not one;
- gpu-hot: the card within `gpu_hot_margin_c` degrees of its slowdown threshold;
- gpu-ecc: an uncorrected ECC error since the driver loaded, a row remap or page retirement
  waiting for the next reset, or a remap that failed;
- gpu-xid: an Xid error read in the last `event_hold_minutes`, one alert per card and code,
  with what NVIDIA's catalogue says the code means;
- gpu-lost: the driver lost the card (NVML "GPU is lost"); its other rules are not judged,
  since every figure of it is unknown, but its Xids still are.

A figure the driver does not report (None) never fires a rule.
"""

from __future__ import annotations

import time

from fleetdeck.backend.fleet.alert_rules import AlertConfig, Hold
from fleetdeck.backend.fleet.gpu_health import REASON_WORDS, hot_margin, slowdowns, xid_meaning
from fleetdeck.backend.fleet.models import Gpu, HostSnapshot


def judge_gpus(h: HostSnapshot, now: float, hold: Hold, config: AlertConfig) -> None:
    """Hold each GPU health condition that is true of `h` now."""
    for g in h.gpus:
        subject = f"GPU{g.index}"
        where = f"GPU{g.index} on {h.name}"
        if g.lost is not None:
            # every figure of a lost card is unknown: only its Xids can still say what happened
            hold(
                "gpu-lost",
                h.name,
                subject,
                now,
                f"{where} is lost (the driver says: {g.lost}); its memory, processes and health are "
                "unknown until the card is reset or the host rebooted",
            )
            _xids(h, g, now, hold, config)
            continue
        slow = slowdowns(g)
        if slow:
            clocks = (
                f" (SM at {g.sm_clock_mhz} of {g.sm_clock_max_mhz} MHz)"
                if g.sm_clock_mhz is not None and g.sm_clock_max_mhz
                else ""
            )
            hold(
                "gpu-throttled",
                h.name,
                subject,
                now,
                f"{where} is slowed down: {', '.join(REASON_WORDS.get(r, r) for r in slow)}{clocks}"
                + _temp(g),
            )
        margin = hot_margin(g)
        if margin is not None and margin <= config.gpu_hot_margin_c:
            hold(
                "gpu-hot",
                h.name,
                subject,
                now,
                f"{where} is at {g.temperature_c} °C, {margin} °C from its slowdown threshold "
                f"({g.temperature_slowdown_c} °C)",
            )
        ecc = _ecc_problems(g)
        if ecc:
            hold("gpu-ecc", h.name, subject, now, f"{where}: {'; '.join(ecc)}")
        _xids(h, g, now, hold, config)


def _temp(g: Gpu) -> str:
    return "" if g.temperature_c is None else f", {g.temperature_c} °C"


def _ecc_problems(g: Gpu) -> list[str]:
    e = g.ecc
    out = []
    if e.uncorrected:
        out.append(
            f"{e.uncorrected} uncorrected ECC error{'s' if e.uncorrected != 1 else ''} since the driver loaded"
        )
    if e.pending_retirement:
        out.append("memory rows or pages wait to be remapped or retired at the next GPU reset")
    if e.remap_failure:
        out.append("a row remap failed (the card has run out of spare rows)")
    return out


def _xids(h: HostSnapshot, g: Gpu, now: float, hold: Hold, config: AlertConfig) -> None:
    window = config.event_hold_minutes * 60
    by_code: dict[int, list[float]] = {}
    for x in g.xid or ():
        if now - x.time < window:
            by_code.setdefault(x.code, []).append(x.time)
    for code, times in sorted(by_code.items()):
        last = time.strftime("%H:%M:%S", time.localtime(max(times)))
        n = f"{len(times)} times, last at {last}" if len(times) > 1 else f"at {last}"
        hold(
            "gpu-xid",
            h.name,
            f"GPU{g.index} Xid {code}",
            min(times),
            f"GPU{g.index} on {h.name} reported Xid {code} ({n}): {xid_meaning(code)}",
        )


__all__ = ["judge_gpus"]
