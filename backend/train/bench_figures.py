"""The figures a bench reports beside its timings: median s/step, spread, tokens/s, achieved
TFLOP/s and MFU (`summarize`), against the GPU's dense bf16 datasheet rate
(`DATASHEET_BF16_TFLOPS`) and a measured bf16 matmul peak (`matmul_peak_tflops`). Imports torch
only inside `matmul_peak_tflops`."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: dense (no sparsity) bf16 tensor-core TFLOP/s from each GPU's datasheet, matched in this order
#: against the name torch reports (the first pattern the name contains wins; None: no published
#: figure, so no datasheet MFU)
DATASHEET_BF16_TFLOPS: tuple[tuple[str, float | None], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("B100", 1750.0),
    ("GH200", 989.4),
    ("H200 NVL", 835.5),
    ("H200", 989.4),
    ("H100 NVL", 835.5),
    ("H100 PCIe", 756.5),
    ("H100", 989.4),
    ("H800", 989.4),
    ("H20", 148.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("A10G", None),
    ("A10", 125.0),
    ("L40S", 362.05),
    ("L40", 181.05),
    ("L4", 121.0),
    ("RTX 4090", 165.2),
    ("GB10", 104.0),
)


def datasheet_tflops(name: str) -> float | None:
    """The dense bf16 datasheet rate of the GPU torch calls `name`, None when not in the table."""
    low = name.lower()
    return next((v for k, v in DATASHEET_BF16_TFLOPS if k.lower() in low), None)


def summarize(
    times: list[float],
    tokens: list[int],
    flops: list[float],
    peak_tflops: float | None,
    peak_bytes: int | None,
    datasheet: float | None,
) -> dict:
    """Median s/step, spread, tokens/s, memory and MFU of timed steps (`flops`: each step's)."""
    med = statistics.median(times)
    tok_s = sum(tokens) / sum(times)
    achieved = sum(flops) / sum(times) / 1e12
    return {
        "flops_per_token": round(sum(flops) / max(1, sum(tokens))),
        "median_s_per_step": round(med, 4),
        "min_s_per_step": round(min(times), 4),
        "max_s_per_step": round(max(times), 4),
        "spread_pct": round(100 * (max(times) - min(times)) / med, 2),
        "tokens_per_step": round(sum(tokens) / len(tokens), 1),
        "tokens_per_second": round(tok_s, 1),
        "achieved_tflops": round(achieved, 1),
        "mfu": round(achieved / datasheet, 4) if datasheet else None,
        "mfu_measured": round(achieved / peak_tflops, 4) if peak_tflops else None,
        "peak_memory_gib": round(peak_bytes / 2**30, 2) if peak_bytes is not None else None,
        "s_per_step": [round(t, 4) for t in times],
    }


def matmul_peak_tflops(device: torch.device) -> float | None:
    """bf16 8192^3 matmul rate on random data (median of 10), `mfu_measured`'s denominator."""
    # deferred: torch (seconds; the bench's --help runs without it)
    import torch

    if device.type != "cuda":
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del a, b
    return 2 * 8192**3 / statistics.median(times) / 1e12


__all__ = ["DATASHEET_BF16_TFLOPS", "datasheet_tflops", "matmul_peak_tflops", "summarize"]
