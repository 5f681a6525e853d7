"""The two rates of a run's bound (bound.py), measured on this card before the run.

The model is built on the meta device from its config (no memory, no weights) to read its
frozen Linears; each distinct product shape (q/k/v and gate/up as one where the trainer fuses
them) is timed as the trainer runs it, a forward product `F.linear(x, w)` and an input-gradient
product `dy @ w`, bf16 on random data, at the run's tokens per forward pass (the output head on
fewer rows, so that its logits stay under 2 GiB). The attention kernel the run will choose
(`attention.choose_kernel`, the same trials) is timed forward and backward on rows of one
`seq_len`-long document each. Every time is the median of ten CUDA-event timings after three
warm-up calls.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from . import attention, bound
from .models import build_model, layer_kinds, shapes_of
from .recipe import pick_dtype
from .varlen_kernels import run_varlen, varlen_reference

if TYPE_CHECKING:
    from collections.abc import Callable

    from .runconfig import RunConfig

#: the most tokens a forward pass is timed at (8 rows of 4096: the 0.6B recipe's forward pass)
MAX_ROWS = 32768
#: the largest output a timed product may write (the output head's logits)
MAX_OUT_BYTES = 2 << 30


def median_seconds(fn: Callable[[], object], reps: int = 10, warmup: int = 3) -> float:
    """The median of `reps` CUDA-event timings of `fn()` after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def meta_model(base_model: str) -> nn.Module:
    """The model on the meta device: its modules and config, no weights."""
    if base_model.startswith("random:"):
        return build_model(base_model, torch.bfloat16, torch.device("meta"), "sdpa", 0)
    # deferred: transformers (seconds; only a local checkpoint needs its Auto classes here)
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base_model, local_files_only=True)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def linears(model: nn.Module) -> list[tuple[str, int, int]]:
    """(path, in, out) of every Linear: the weights `lora.matmul_parameter_count` counts."""
    return [
        (name, m.in_features, m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and "lora_" not in name
    ]


def time_gemm(
    n_in: int, n_out: int, rows: int, device: torch.device, dtype: torch.dtype
) -> tuple[float, float]:
    """(forward, input-gradient) seconds of one product shape at `rows` rows."""
    x = torch.randn(rows, n_in, device=device, dtype=dtype)
    w = torch.randn(n_out, n_in, device=device, dtype=dtype)
    dy = torch.randn(rows, n_out, device=device, dtype=dtype)
    fwd = median_seconds(lambda: F.linear(x, w))
    grad = median_seconds(lambda: dy @ w)

    return fwd, grad


def time_attention(
    kernel: str,
    heads: int,
    kv_heads: int,
    head_dim: int,
    seq_len: int,
    tokens: int,
    device: torch.device,
    dtype: torch.dtype,
) -> float:
    """Seconds of one forward and backward of `kernel` ("fa4", "flash", "cudnn", or "sdpa" for
    per-document SDPA) over `tokens // seq_len` documents of `seq_len` tokens, one layer."""
    docs = max(1, tokens // seq_len)
    t = docs * seq_len
    cu = torch.arange(0, t + 1, seq_len, dtype=torch.int32, device=device)
    q = torch.randn(t, heads, head_dim, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(t, kv_heads, head_dim, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(t, kv_heads, head_dim, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(t, heads, head_dim, device=device, dtype=dtype)
    scale = head_dim**-0.5

    def step() -> None:
        if kernel == "sdpa":
            out = varlen_reference(q, k, v, cu, scale)
        else:
            out = run_varlen(kernel, q, k, v, cu, seq_len, scale)
        torch.autograd.grad(out, (q, k, v), g)

    return median_seconds(step)


def tokens_per_forward(seq_len: int, rows_per_step: int) -> int:
    """The tokens a forward pass is timed at: the step's rows, at most MAX_ROWS tokens."""
    return max(seq_len, min(MAX_ROWS, seq_len * rows_per_step) // seq_len * seq_len)


def measure(
    cfg: RunConfig,
    device: torch.device,
    log: Callable[..., object] | None = None,
    kernel: str | None = None,
) -> dict:
    """Both rates for `cfg` on `device` (CUDA), with each shape's figures; `kernel` overrides
    the attention kernel the run would choose."""
    start = time.perf_counter()
    dtype = pick_dtype(cfg, device)
    model = meta_model(cfg.base_model)
    s = shapes_of(model)
    text = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    )
    kv_heads = int(getattr(text, "num_key_value_heads", None) or s.heads)
    attention_layers = sum(k == "attention" for k in layer_kinds(model.config)) or s.layers
    fused = cfg.fused_projections is True or (
        cfg.fused_projections == "auto" and device.type == "cuda"
    )
    shapes = bound.gemm_shapes(linears(model), fused)
    del model
    if kernel is None:
        flash, kernel, _ = attention.choose_kernel(cfg.attention, device, dtype, lambda m: None)
        kernel = kernel if flash else "sdpa"
    tokens = tokens_per_forward(cfg.seq_len, cfg.rows_per_step)
    seconds, rows, gemms = {}, {}, []
    for g in shapes:
        r = min(tokens, max(256, MAX_OUT_BYTES // (2 * max(g.n_in, g.n_out)) // 256 * 256))
        fwd, grad = time_gemm(g.n_in, g.n_out, r, device, dtype)
        seconds[(g.n_in, g.n_out)], rows[(g.n_in, g.n_out)] = fwd + grad, r
        flops = 2.0 * r * g.n_in * g.n_out
        gemms.append(
            {
                "n_in": g.n_in,
                "n_out": g.n_out,
                "per_forward": g.count,
                "rows": r,
                "forward_tflops": round(flops / fwd / 1e12, 1),
                "input_grad_tflops": round(flops / grad / 1e12, 1),
            }
        )
    t_attn = time_attention(
        kernel, s.heads, kv_heads, s.head_dim, cfg.seq_len, tokens, device, dtype
    )
    docs = max(1, tokens // cfg.seq_len)
    rates = bound.Rates(
        matmul=bound.matmul_rate(shapes, seconds, rows),
        attention=bound.attention_flops(s.heads, s.head_dim, [cfg.seq_len] * docs) / t_attn,
    )
    torch.cuda.empty_cache()
    out = {
        "matmul_tflops": round(rates.matmul / 1e12, 3),
        "attention_tflops": round(rates.attention / 1e12, 3),
        "attention_kernel": kernel,
        "attention_ms": round(t_attn * 1e3, 3),
        "attention_shape": f"{docs} x {cfg.seq_len} tokens, {s.heads}/{kv_heads} heads of {s.head_dim}",
        "attention_layers": attention_layers,
        "tokens_per_forward": tokens,
        "fused_projections": fused,
        "gemms": gemms,
        "seconds": round(time.perf_counter() - start, 1),
    }
    if log is not None:
        log(
            f"bound rates on this card: bf16 matmul {out['matmul_tflops']:.0f} TFLOP/s over the "
            f"model's {len(shapes)} product shapes at {tokens} rows (forward and input gradient), "
            f"attention ({kernel}) forward + backward {out['attention_tflops']:.0f} TFLOP/s on "
            f"{out['attention_shape']} ({out['seconds']:.1f} s)"
        )
    return out


__all__ = ["MAX_ROWS", "measure", "median_seconds", "time_attention", "time_gemm"]
