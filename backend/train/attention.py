"""Attention that never crosses a document: flash varlen on CUDA, per-range SDPA elsewhere.

The trainer feeds a micro-batch as one flat sequence (batch dimension 1) with position ids that
restart at every document piece and `cu_seq_lens_q` (cumulative range lengths, int32). The
function registered here as `fleetdeck_varlen` attends causally inside each range only, and no
attention mask is built (transformers skips mask creation for attention functions it does not
know a mask for).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "fleetdeck_varlen"


class _FlashVarlen(torch.autograd.Function):
    """Causal flash attention over packed ranges (torch's bundled FlashAttention-2 kernels)."""

    @staticmethod
    def forward(ctx, q, k, v, cu, max_len, scale):  # type: ignore[override]
        out, lse, rng, unused, _ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, max_len, max_len, 0.0, True, False, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse, cu, rng, unused)
        ctx.max_len, ctx.scale = max_len, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse, cu, rng, unused = ctx.saved_tensors
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            grad_out.contiguous(), q, k, v, out, lse, cu, cu, ctx.max_len, ctx.max_len, 0.0, True,
            rng, unused, scale=ctx.scale)
        return dq, dk, dv, None, None, None


def _cudnn_varlen(q, k, v, cu, max_len, scale):
    """Causal attention over packed ranges through cuDNN's fused kernel (aten's autograd does the
    backward); grouped K/V heads are repeated to the query heads first."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, max_len, max_len, True, 0.0, True,
                                                   False, scale=scale)[0]


@torch.compiler.disable
def cudnn_varlen_works(device: torch.device, dtype: torch.dtype, log=None) -> bool:
    """Whether cuDNN's varlen attention runs here and agrees with per-document SDPA (forward and
    gradients, ranges of uneven length) within bf16 rounding."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    why = None
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        lens = [100, 37, 251, 124]
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
        t = sum(lens)
        q, k, v = (torch.randn(t, h, 128, device=device, dtype=dtype, generator=gen).requires_grad_()
                   for h in (4, 2, 2))
        g = torch.randn(t, 4, 128, device=device, dtype=dtype, generator=gen)
        out = _cudnn_varlen(q, k, v, cu, max(lens), 128 ** -0.5)
        grads = torch.autograd.grad(out, (q, k, v), g)
        ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
        ref = varlen_reference(*ref_in, cu, 128 ** -0.5)
        ref_grads = torch.autograd.grad(ref, ref_in, g.double())
        for a, b in zip((out, *grads), (ref, *ref_grads), strict=True):
            err = float((a.double() - b).norm() / b.norm())
            if not err < 2e-2:
                why = f"relative error {err:.2e} against per-document SDPA"
                break
    except Exception as e:  # noqa: BLE001
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
    if why and log is not None:
        log(f"cuDNN varlen attention failed its trial here ({why}); using flash varlen")
    return why is None


def flash_varlen_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the flash varlen kernel can run here (CUDA, sm80 or newer, half precision)."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    major, _ = torch.cuda.get_device_capability(device)
    return major >= 8 and hasattr(torch.ops.aten, "_flash_attention_forward")


@torch.compiler.disable
def flash_varlen_works(device: torch.device, dtype: torch.dtype, log=None) -> bool:
    """Whether the flash varlen kernel is available and runs forward and backward here (a tiny
    trial: a GPU generation newer than the kernels torch ships falls back to per-document SDPA)."""
    if not flash_varlen_available(device, dtype):
        return False
    try:
        q = torch.randn(64, 4, 128, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn(64, 2, 128, device=device, dtype=dtype, requires_grad=True)
        v = torch.randn(64, 2, 128, device=device, dtype=dtype, requires_grad=True)
        cu = torch.tensor([0, 20, 64], dtype=torch.int32, device=device)
        out = _FlashVarlen.apply(q, k, v, cu, 64, 128 ** -0.5)
        torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001
        if log is not None:
            first = (str(e).strip().splitlines() or [""])[0][:200]
            log(f"flash varlen attention failed its trial here ({type(e).__name__}: {first}); "
                "using per-document SDPA")
        return False
    return True


def varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor,
                     scale: float | None) -> torch.Tensor:
    """Per-range causal SDPA on (T, H, D) tensors: slow, exact, for CPU and for checking."""
    bounds = cu.tolist()
    rep = q.shape[1] // k.shape[1]
    outs = []
    for s, e in zip(bounds[:-1], bounds[1:], strict=False):
        if e <= s:
            continue
        qs, ks, vs = (t[s:e].transpose(0, 1) for t in (q, k, v))
        if rep > 1:
            ks, vs = ks.repeat_interleave(rep, 0), vs.repeat_interleave(rep, 0)
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale).transpose(0, 1))
    return torch.cat(outs, 0)


_USE_FLASH: dict[str, bool] = {}
#: "cudnn" when the cuDNN varlen kernel was chosen (and passed its trial)
_KERNEL: dict[str, str] = {}


def varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function: (B=1, H, T, D) in, (1, T, H, D) out, ranges from kwargs."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        raise RuntimeError("fleetdeck_varlen attention needs cu_seq_lens_q (pass the packed batch)")
    max_len = int(kwargs.get("max_length_q") or query.shape[2])
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, H, D)
    flash = _USE_FLASH.get("on")
    if flash is None:
        flash = flash_varlen_available(q.device, q.dtype)
    if flash and _KERNEL.get("name") == "cudnn":
        out = _cudnn_varlen(q.contiguous(), k.contiguous(), v.contiguous(), cu, max_len, scaling)
    elif flash:
        out = _FlashVarlen.apply(q.contiguous(), k.contiguous(), v.contiguous(), cu, max_len, scaling)
    else:
        out = varlen_reference(q, k, v, cu, scaling)
    return out.unsqueeze(0), None


def register(force_flash: bool | None = None, kernel: str = "flash") -> str:
    """Register `fleetdeck_varlen` with transformers; returns the name to set on the config.
    `kernel` picks the fused varlen kernel where one is used: "flash" or "cudnn"."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, varlen_attention)
    _KERNEL["name"] = kernel
    if force_flash is None:
        _USE_FLASH.pop("on", None)
    else:
        _USE_FLASH["on"] = force_flash
    return NAME


__all__ = ["NAME", "cudnn_varlen_works", "register", "varlen_attention", "varlen_reference", "flash_varlen_available",
           "flash_varlen_works"]
