"""The fused kernels behind `fleetdeck_varlen` (attention.py chooses among them): causal attention
inside each packed range of a flat (T, H, D) sequence, never across a document. torch's bundled
FlashAttention-2 (`FlashVarlen`, an autograd Function over aten's flash ops), cuDNN's fused
kernel, and FlashAttention-4's CuTe DSL kernels as two torch custom ops (so torch.compile keeps
each decoder layer one graph); `varlen_reference` is per-range SDPA, slow and exact, for the CPU
and for checking the others. Imports torch; flash-attn-4 only when its kernel is asked for."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class FlashVarlen(torch.autograd.Function):
    """Causal flash attention over packed ranges (torch's bundled FlashAttention-2 kernels)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu: torch.Tensor,
        max_len: int,
        scale: float | None,
    ) -> torch.Tensor:
        out, lse, rng, unused, _ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, max_len, max_len, 0.0, True, False, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse, cu, rng, unused)
        ctx.max_len, ctx.scale = max_len, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse, cu, rng, unused = ctx.saved_tensors
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            grad_out.contiguous(),
            q,
            k,
            v,
            out,
            lse,
            cu,
            cu,
            ctx.max_len,
            ctx.max_len,
            0.0,
            True,
            rng,
            unused,
            scale=ctx.scale,
        )
        return dq, dk, dv, None, None, None


def _cudnn_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    max_len: int,
    scale: float | None,
) -> torch.Tensor:
    """Causal attention over packed ranges through cuDNN's fused kernel (aten's autograd does the
    backward); grouped K/V heads are repeated to the query heads first."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return torch.ops.aten._cudnn_attention_forward(
        q, k, v, None, cu, cu, max_len, max_len, True, 0.0, True, False, scale=scale
    )[0]


def _fa4_interface() -> Any:
    # deferred: flash_attn.cute, the optional flash-attn-4 package (absent on most machines)
    from flash_attn.cute import interface

    return interface


if hasattr(torch.library, "custom_op"):
    # FlashAttention-4 as two custom ops, so torch.compile keeps each decoder layer one graph
    # (its own autograd.Function would break the graph at every attention call)
    @torch.library.custom_op("fleetdeck::fa4_varlen_fwd", mutates_args=())
    def _fa4_fwd(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu: torch.Tensor,
        max_len: int,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = _fa4_interface()._flash_attn_fwd(
            q,
            k,
            v,
            cu_seqlens_q=cu,
            cu_seqlens_k=cu,
            max_seqlen_q=max_len,
            max_seqlen_k=max_len,
            softmax_scale=scale,
            causal=True,
            return_lse=True,
        )[:2]
        return out, lse

    @_fa4_fwd.register_fake
    def _(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu: torch.Tensor,
        max_len: int,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(
            (q.shape[1], q.shape[0]), dtype=torch.float32
        )

    @torch.library.custom_op("fleetdeck::fa4_varlen_bwd", mutates_args=())
    def _fa4_bwd(
        dout: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        cu: torch.Tensor,
        max_len: int,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dq, dk, dv = _fa4_interface()._flash_attn_bwd(
            q,
            k,
            v,
            out,
            dout,
            lse,
            scale,
            True,
            0.0,
            cu_seqlens_q=cu,
            cu_seqlens_k=cu,
            max_seqlen_q=max_len,
            max_seqlen_k=max_len,
        )[:3]
        return dq, dk, dv

    @_fa4_bwd.register_fake
    def _(
        dout: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        cu: torch.Tensor,
        max_len: int,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def _fa4_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        q, k, v, cu, max_len, scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, cu)
        ctx.max_len, ctx.scale = max_len, scale

    def _fa4_backward(
        ctx: Any, grad_out: torch.Tensor, grad_lse: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse, cu = ctx.saved_tensors
        dq, dk, dv = _fa4_bwd(grad_out.contiguous(), q, k, v, out, lse, cu, ctx.max_len, ctx.scale)
        return dq, dk, dv, None, None, None

    _fa4_fwd.register_autograd(_fa4_backward, setup_context=_fa4_setup)


def _fa4_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    max_len: int,
    scale: float | None,
) -> torch.Tensor:
    """Causal attention over packed ranges through FlashAttention-4 (grouped K/V heads native)."""
    if scale is None:  # the op takes a float (float(None) raised this TypeError before)
        raise TypeError("FlashAttention-4 varlen attention needs the softmax scale")
    return _fa4_fwd(q, k, v, cu, int(max_len), float(scale))[0]


def fa4_installed() -> bool:
    """Whether the `flash-attn-4` package (flash_attn.cute) can be imported here."""
    try:
        _fa4_interface()
    except Exception:  # noqa: BLE001  (ImportError, or a CUDA DSL that fails to load)
        return False
    return hasattr(torch.library, "custom_op")


#: the fused varlen kernels other than torch's bundled flash: name -> (function, what it is)
KERNELS = {
    "cudnn": (_cudnn_varlen, "cuDNN varlen attention"),
    "fa4": (_fa4_varlen, "FlashAttention-4 varlen attention"),
}


def varlen_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, scale: float | None
) -> torch.Tensor:
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
        outs.append(
            F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale).transpose(0, 1)
        )
    return torch.cat(outs, 0)


def run_varlen(
    kernel: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    max_len: int,
    scale: float | None,
) -> torch.Tensor:
    """Causal attention over packed ranges through the fused `kernel`: "flash" (torch's bundled
    FlashAttention-2) or a name in KERNELS; (T, H, D) tensors in and out."""
    if kernel in KERNELS:
        return KERNELS[kernel][0](q, k, v, cu, max_len, scale)
    return FlashVarlen.apply(q, k, v, cu, max_len, scale)


__all__ = ["KERNELS", "FlashVarlen", "fa4_installed", "run_varlen", "varlen_reference"]
