"""FP8 for the frozen base products (RUN.toml `base_fp8 = true`; off by default).

A LoRA run never trains the base weights, so each decoder projection costs two base products a
micro-batch: the forward (x W^T) and the input's gradient (dy W). With `base_fp8` both run as
float8_e4m3 matmuls (`torch._scaled_mm`, float32 accumulation) with row-wise scales: x and dy
are cast by row on every call, each frozen weight once, by output row for the forward and by
input column for the gradient (two float8 copies beside the bf16 weight: two bytes a parameter).
The LoRA products, the attention, the norms and the optimizer stay as they are, in bf16 and
float32.

The price is precision: a product moves about 3.7e-2 from float32 arithmetic on the same inputs
(relative Frobenius error), against bf16's 1.7e-3 (`benchmarks/fp8_matmuls.py` on an H200).
`benchmarks/check_parity.py` measures what that does to a run's loss; the bench measures the
speed (`train_bench.py --levers base-fp8`). Needs torch's row-wise float8 matmul, which has
kernels for compute capability 8.9, 9.x and 10.x (`kernel_choice.choose` holds the table);
elsewhere `base_fp8 = true` is refused with the reason.

Memory: each float8 weight holds two float8 copies (out x in and in x out, one byte each) and two
float32 scale vectors (out and in): 2 x out x in + 4 x (out + in) bytes beside the bf16 weight,
for the LoRA-wrapped projections only (`apply_fp8`); the launch estimate counts the same.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from . import kernel_choice

E4M3 = torch.float8_e4m3fn
#: the largest float8_e4m3 value: a row's largest magnitude is scaled to it
FMAX = 448.0


def quant_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` (rows x cols) as float8_e4m3 with one float32 scale per row (rows x 1)."""
    amax = t.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / FMAX
    return (t.float() / scale).to(E4M3), scale


def unsupported(device: torch.device) -> str | None:
    """Why float8 base products cannot run on `device`, or None when they can (the verdict of
    `kernel_choice.choose` for its compute capability)."""
    if device.type != "cuda":
        return f"base_fp8 needs a CUDA GPU with float8 matmuls; this run is on {device.type}"
    cap = torch.cuda.get_device_capability(device)
    verdict = kernel_choice.choose(
        (cap[0], cap[1]), fa4=False, flash=True, float8=hasattr(torch, "_scaled_mm")
    )
    if not verdict.base_fp8:
        return (
            f"{torch.cuda.get_device_name(device)} is compute capability {cap[0]}.{cap[1]}: "
            f"{verdict.fp8_why}"
        )
    return None


class Fp8Weight:
    """A frozen weight (out x in) in float8, once for each product it takes part in."""

    def __init__(self, w: torch.Tensor):
        w = w.detach()
        self.fwd, s = quant_rows(w)  # out x in, scales out x 1
        self.fwd_scale = s.reshape(1, -1).contiguous()
        self.grad, s = quant_rows(w.t().contiguous())  # in x out, scales in x 1
        self.grad_scale = s.reshape(1, -1).contiguous()


def _fits(w: torch.Tensor) -> bool:
    """Whether float8 matmuls take this weight: both sides in multiples of 16."""
    return w.shape[0] % 16 == 0 and w.shape[1] % 16 == 0


class _Fp8Linear(torch.autograd.Function):
    """x W^T in float8 with row-wise scales; the input's gradient likewise; no weight gradient."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        wf: torch.Tensor,
        sf: torch.Tensor,
        wg: torch.Tensor,
        sg: torch.Tensor,
    ) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # float8 matmuls take row-major rows
        xq, xs = quant_rows(x2)
        out = torch._scaled_mm(xq, wf.t(), scale_a=xs, scale_b=sf, out_dtype=x.dtype)
        ctx.save_for_backward(wg, sg)
        return out.reshape(*x.shape[:-1], wf.shape[0])

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        wg, sg = ctx.saved_tensors
        d2 = dout.reshape(-1, dout.shape[-1]).contiguous()
        dq, ds = quant_rows(d2)
        dx = torch._scaled_mm(dq, wg.t(), scale_a=ds, scale_b=sg, out_dtype=dout.dtype)
        return dx.reshape(*dout.shape[:-1], wg.shape[0]), None, None, None, None


def fp8_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """x W^T through `w`'s float8 copies, in the dtype the bf16 product would have run in
    (autocast's, else the input's)."""
    dt = (
        torch.get_autocast_dtype(x.device.type)
        if torch.is_autocast_enabled(x.device.type)
        else x.dtype
    )
    with torch.autocast(x.device.type, enabled=False):
        return _Fp8Linear.apply(x.to(dt), w.fwd, w.fwd_scale, w.grad, w.grad_scale)


def _fp8_base_forward(self: nn.Module, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    (owner,) = self._fd_fp8_owner
    if getattr(owner, "merged", False):
        # the adapter was merged into this weight since its float8 copies were made: those
        # copies are the old weight, so the merged one runs as it is
        return nn.functional.linear(x, self.weight, self.bias)
    return fp8_linear(x, self._fd_fp8)


def apply_fp8(model: nn.Module) -> int:
    """Run every frozen base product of the LoRA-wrapped projections in float8: the fused
    groups' (`fused.Group`, their LoRA product then apart from the base matmul) and each other
    LoRA Linear's base layer. Returns how many base weights now run in float8."""
    n = 0
    grouped: set[int] = set()
    for m in model.modules():
        for name in ("_fd_qkv", "_fd_gate_up"):
            g = getattr(m, name, None)  # a fused.Group (fused.py imports this module)
            if g is not None and hasattr(g, "fp8") and _fits(g.weight):
                g.fp8 = Fp8Weight(g.weight)
                g.lora_in_base = False
                grouped.update(id(p.base_layer) for p in g.mods)
                n += 1
    for m in model.modules():
        base = getattr(m, "base_layer", None)
        if not isinstance(base, nn.Linear) or id(base) in grouped or base.bias is not None:
            continue
        if base.weight.requires_grad or getattr(m, "merged", False):
            continue
        if not _fits(base.weight):
            continue
        base._fd_fp8 = Fp8Weight(base.weight)
        # the LoRA layer that owns it (in a tuple: a module attribute would register it as a child)
        base._fd_fp8_owner = (m,)
        base.forward = types.MethodType(_fp8_base_forward, base)
        n += 1
    return n


__all__ = ["Fp8Weight", "apply_fp8", "fp8_linear", "quant_rows", "unsupported"]
