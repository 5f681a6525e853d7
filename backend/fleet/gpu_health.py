"""What a GPU's health figures mean: the throttle reasons the probe reports (nvml.h's clock
event reasons, as words), which of them slow the card down, and NVIDIA's Xid catalogue for
the codes seen on data-centre cards. The rules (`monitor/rules/alerts.py`), the dashboard and the
exporter read them from here."""

from __future__ import annotations

from fleetdeck.backend.fleet.models import Gpu

#: each reason word the probe can report, in a few words for a person
REASON_WORDS = {
    "idle": "idle",
    "applications-clocks-setting": "application clocks",
    "sw-power-cap": "power cap",
    "hw-slowdown": "hardware slowdown",
    "sync-boost": "sync boost",
    "sw-thermal-slowdown": "thermal (software)",
    "hw-thermal-slowdown": "thermal (hardware)",
    "hw-power-brake-slowdown": "power brake",
    "display-clock-setting": "display clock",
}
#: the reasons that are a slowdown (the card is held below the clocks it was asked for because
#: it is too hot or its board says stop), as opposed to idling, a power cap doing its job, or a
#: setting: gpu-throttled fires on these
SLOWDOWN = ("hw-thermal-slowdown", "sw-thermal-slowdown", "hw-power-brake-slowdown", "hw-slowdown")
#: the reasons shown as a throttle mark in the Fleet row, most serious first
MARKED = (*SLOWDOWN, "sw-power-cap")

#: NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors), the codes a data-centre card
#: reports most, in one line each
XID_MEANINGS = {
    8: "GPU stopped processing (a channel timed out)",
    13: "graphics engine exception (usually the application: an illegal instruction or address)",
    31: "GPU memory page fault (usually the application: an invalid address)",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing: the application hit a fault, the GPU is healthy",
    45: "preemptive cleanup after an earlier error (the application was killed)",
    48: "double-bit ECC error: uncorrectable memory error (reset the GPU)",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt (reset the GPU)",
    63: "ECC page retirement or row remap recorded (reset the GPU to apply it)",
    64: "ECC page retirement or row remap failed to record",
    68: "video processor (NVDEC) exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus (reboot the host)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error: the application that hit it must restart",
    95: "uncontained ECC error: every application on the GPU is affected (reset the GPU)",
    109: "context switch timeout",
    119: "GSP RPC timeout (reset the GPU)",
    120: "GSP error (reset the GPU)",
    121: "C2C link error",
    140: "unrecovered ECC error",
    154: "GPU recovery action changed (the driver asks for a reset or reboot)",
}


def xid_meaning(code: int) -> str:
    """What NVIDIA's Xid catalogue says code `code` means, or where to look."""
    return XID_MEANINGS.get(code, "not in fleetdeck's table: see NVIDIA's Xid catalogue")


def slowdowns(g: Gpu) -> tuple[str, ...]:
    """The slowdown reasons active on `g` (none when unknown)."""
    return tuple(r for r in SLOWDOWN if r in (g.throttle_reasons or ()))


def throttle_mark(g: Gpu) -> str | None:
    """The most serious marked reason active on `g`, as its reason word, or None."""
    return next((r for r in MARKED if r in (g.throttle_reasons or ())), None)


def reason_words(reasons: tuple[str, ...] | None) -> str:
    """Reasons in words, joined (`power cap, thermal (hardware)`); `-` for none, `?` unknown."""
    if reasons is None:
        return "?"
    shown = [REASON_WORDS.get(r, r) for r in reasons if r != "idle"]
    return ", ".join(shown) if shown else ("idle" if reasons else "-")


def hot_margin(g: Gpu) -> int | None:
    """Degrees between the card's temperature and its slowdown threshold (None when either
    is unknown)."""
    if g.temperature_c is None or g.temperature_slowdown_c is None:
        return None
    return g.temperature_slowdown_c - g.temperature_c


__all__ = [
    "MARKED",
    "REASON_WORDS",
    "SLOWDOWN",
    "XID_MEANINGS",
    "hot_margin",
    "reason_words",
    "slowdowns",
    "throttle_mark",
    "xid_meaning",
]
