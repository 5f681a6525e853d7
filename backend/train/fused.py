"""Fused projections: q/k/v and gate/up, which read the same input, as one matmul each.

After LoRA is applied, a decoder layer of a Llama-shaped model (Qwen3, Qwen2, Llama, Mistral)
runs five projections on one input in two groups: q/k/v and gate/up. Fusing a group means:
- the frozen base weights are laid side by side in one buffer, and each projection's weight
  becomes a view of its rows (no extra memory, the state dict unchanged), so the group's base
  product is one wider matmul;
- the group's LoRA A matrices (r rows each) are concatenated on every forward (a few hundred
  KB), so the input is read once for all of them, and the B matrices, scaled, form one
  block-diagonal matrix, so the group's LoRA product is one matmul too.
Only the forward's arithmetic changes; the parameters, their gradients and the saved adapter are
the same tensors as unfused (`tests/train/test_fused.py` compares loss and every gradient in float32).

A layer is fused only where the result is certainly the same: every projection of the group a
peft LoRA Linear with one active adapter, no dropout, no bias, unmerged; an attention module of a
known class (its forward is replaced on that instance only, for training without a cache).
Anything else keeps transformers' own forward.

Where the group's output is wider than its input (q/k/v, gate/up), its LoRA product also joins
the base matmul (RUN.toml's `lora_in_base`, on by default): out = [x, x A^T] @ [W, s B]^T, one product over K = in + R
(R the group's rank total), so the low-rank product is never written and read back as a full-width
tensor, and in backward one product of the output's gradient with [W, s B] gives both the input's
and x A^T's gradients (the output's gradient is read once for them instead of twice).
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from .fp8 import fp8_linear

#: attention classes whose forward the fused one reproduces (q/k/v, optional q/k norms, RoPE, o)
ATTENTION_CLASSES = {"Qwen3Attention", "Qwen2Attention", "LlamaAttention", "MistralAttention"}
#: MLP classes computing down(act(gate(x)) * up(x))
MLP_CLASSES = {"Qwen3MLP", "Qwen2MLP", "LlamaMLP", "MistralMLP"}


def _lora_parts(
    mod: nn.Module,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float] | None:
    """(base weight, A, B, scale) of a peft LoRA Linear that can join a fused group, else None."""
    base = getattr(mod, "base_layer", None)
    if not isinstance(base, nn.Linear) or base.bias is not None or getattr(mod, "merged", False):
        return None
    active = getattr(mod, "active_adapters", None)
    if not isinstance(active, (list, tuple)) or len(active) != 1:
        return None
    name = active[0]
    try:
        a, b = mod.lora_A[name], mod.lora_B[name]
        drop, scale = mod.lora_dropout[name], mod.scaling[name]
    except (AttributeError, KeyError, TypeError):
        return None
    if not isinstance(drop, nn.Identity) or a.bias is not None or b.bias is not None:
        return None
    if getattr(mod, "use_dora", {}).get(name, False):
        return None
    return base.weight, a.weight, b.weight, float(scale)


class _LoraInBase(torch.autograd.Function):
    """x W^T + (x A^T) B^T as one matmul over [x, x A^T] and [W, B] (B already scaled).

    x (..., in), w (out, in) frozen, a (R, in), b (out, R), all in one dtype; float32 accumulation
    inside each product, as in two separate ones. Saves [x, x A^T] (the two tensors the separate
    products would save) and recomputes [W, B] in backward (a copy of the weight, not kept)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor
    ) -> torch.Tensor:
        xa = torch.nn.functional.linear(x, a)
        xc = torch.cat([x, xa], -1)
        out = torch.nn.functional.linear(xc, torch.cat([w, b], 1))
        ctx.save_for_backward(xc, w, a, b)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xc, w, a, b = ctx.saved_tensors
        n = w.shape[1]
        d2 = dout.reshape(-1, dout.shape[-1])
        x2 = xc.reshape(-1, xc.shape[-1])
        dxc = d2 @ torch.cat([w, b], 1)  # [dL/dx through W, dL/d(x A^T)] in one product
        dxa = dxc[:, n:]
        dx = dxc[:, :n] + dxa @ a  # an add the compiler joins to its consumer
        da = dxa.t() @ x2[:, :n]
        db = d2.t() @ x2[:, n:]
        return dx.reshape(*dout.shape[:-1], n), None, da, db


class Group:
    """Projections sharing an input, computed as one base matmul and one LoRA pair (joined to the
    base matmul with `lora_in_base`, where that saves traffic)."""

    def __init__(self, mods: list[nn.Module], lora_in_base: bool = True):
        found = [_lora_parts(m) for m in mods]
        parts = [p for p in found if p is not None]
        if len(parts) != len(found):
            raise ValueError("not fusable")
        weights = [p[0] for p in parts]
        if len({(w.shape[1], w.dtype, w.device) for w in weights}) != 1:
            raise ValueError("not fusable")
        fused = torch.cat([w.detach() for w in weights], 0)
        # each projection's frozen weight becomes a view of its rows of the fused buffer
        off = 0
        for m, w in zip(mods, weights, strict=True):
            n = w.shape[0]
            m.base_layer.weight = nn.Parameter(fused[off : off + n], requires_grad=False)
            off += n
        self.weight = fused
        self.sizes = [w.shape[0] for w in weights]
        self.mods = mods
        rank = sum(p[1].shape[0] for p in parts)
        # only where it saves traffic (output wider than input) and rows stay 16-byte aligned
        self.lora_in_base = (
            lora_in_base and fused.shape[0] > fused.shape[1] and (fused.shape[1] + rank) % 8 == 0
        )
        #: the base weight in float8 (`fp8.apply_fp8`, RUN.toml's `base_fp8`), else None
        self.fp8 = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        found = [_lora_parts(m) for m in self.mods]
        parts = [p for p in found if p is not None]
        if len(parts) != len(found) or any(
            getattr(m, "disable_adapters", False) for m in self.mods
        ):
            # merged, disabled or changed since fusing: each projection's own forward
            return torch.cat([m(x) for m in self.mods], -1)
        a = torch.cat([p[1] for p in parts], 0)
        b = torch.block_diag(*[p[2] * p[3] for p in parts])
        if self.lora_in_base:
            # the dtype the separate products would run in: autocast's, else the input's
            dt = (
                torch.get_autocast_dtype(x.device.type)
                if torch.is_autocast_enabled(x.device.type)
                else x.dtype
            )
            with torch.autocast(x.device.type, enabled=False):
                return _LoraInBase.apply(x.to(dt), self.weight.to(dt), a.to(dt), b.to(dt))
        if self.fp8 is not None:
            base = fp8_linear(x, self.fp8)
        else:
            base = torch.nn.functional.linear(x, self.weight)
        xa = x if x.dtype == a.dtype or torch.is_autocast_enabled(x.device.type) else x.to(a.dtype)
        low = torch.nn.functional.linear(torch.nn.functional.linear(xa, a), b)
        return base + low.to(base.dtype)


def _attention_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None = None,
    *args: Any,
    **kwargs: Any,
) -> tuple[torch.Tensor, Any]:
    rope = self._fd_rope
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q, k, v = self._fd_qkv(hidden_states).split(self._fd_qkv.sizes, dim=-1)
    q, k, v = q.reshape(hidden_shape), k.reshape(hidden_shape), v.reshape(hidden_shape)
    if getattr(self, "q_norm", None) is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    cos, sin = position_embeddings
    q, k = rope(q, k, cos, sin)
    fn = self._fd_attention[self.config._attn_implementation]
    for key in ("past_key_values", "cache", "past_key_value", "use_cache", "cache_position"):
        kwargs.pop(key, None)
    out, weights = fn(
        self,
        q,
        k,
        v,
        attention_mask,
        dropout=0.0,
        scaling=self.scaling,
        sliding_window=getattr(self, "sliding_window", None),
        **kwargs,
    )
    out = out.reshape(*input_shape, -1).contiguous()
    return self.o_proj(out), weights


def _mlp_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    g, u = self._fd_gate_up(x).split(self._fd_gate_up.sizes, dim=-1)
    return self.down_proj(self.act_fn(g) * u)


def fuse_projections(model: nn.Module, lora_in_base: bool = True) -> dict[str, int]:
    """Fuse q/k/v and gate/up in every decoder layer where it is certainly exact; returns how
    many attention and MLP modules were fused. `lora_in_base`: join each group's LoRA product to
    its base matmul (see the module's text)."""
    import importlib

    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    counts = {"attention": 0, "mlp": 0}
    for m in model.modules():
        cls = type(m).__name__
        if cls in ATTENTION_CLASSES and getattr(m.config, "_attn_implementation", "") in (
            "fleetdeck_varlen",
            "sdpa",
        ):
            mod = importlib.import_module(type(m).__module__)
            rope = getattr(mod, "apply_rotary_pos_emb", None)
            if rope is None or getattr(m, "sliding_window", None):
                continue
            try:
                m._fd_qkv = Group([m.q_proj, m.k_proj, m.v_proj], lora_in_base)
            except (ValueError, AttributeError):
                continue
            m._fd_rope, m._fd_attention = rope, ALL_ATTENTION_FUNCTIONS
            m.forward = types.MethodType(_attention_forward, m)
            counts["attention"] += 1
        elif cls in MLP_CLASSES:
            try:
                m._fd_gate_up = Group([m.gate_proj, m.up_proj], lora_in_base)
            except (ValueError, AttributeError):
                continue
            m.forward = types.MethodType(_mlp_forward, m)
            counts["mlp"] += 1
    return counts


__all__ = ["fuse_projections"]
