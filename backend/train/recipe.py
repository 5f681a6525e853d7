"""Choosing the fastest recipe that fits: rows per forward and gradient checkpointing, from a
one-row memory probe against the card's free memory. Measured on an H200: more tokens per
forward and no recomputation are the two largest levers once attention is padding-free."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from . import attention, kernel_choice
from .corpus import Split
from .runconfig import RunConfig

if TYPE_CHECKING:
    from collections.abc import Callable

#: share of free memory a step may plan to use (fragmentation, the optimizer's first step)
HEADROOM = 0.85


@dataclass
class Recipe:
    """How a step is run on this card (the levers the bench measures)."""

    micro_rows: int
    checkpoint_layers: int  # decoder layers recomputed in backward (0: none)
    compile: bool
    liger: bool
    flash: bool
    dtype: torch.dtype
    #: None: packing as RUN.toml says; else why packing is off for this model
    packing_off: str | None = None
    packing: bool = True
    kernel: str = "flash"
    #: decoder layers whose q/k/v and gate/up run fused (0: none)
    fused_layers: int = 0
    #: how the cross-entropy chunks run ("Triton kernel", "compiled", "eager")
    ce: str = "eager"
    #: in the fused groups, the LoRA product inside the base matmul
    lora_in_base: bool = True
    #: frozen base weights whose products run in float8 (RUN.toml's `base_fp8`; 0: none)
    fp8_weights: int = 0

    def describe(self, layers: int) -> str:
        """One line for the log and the bench."""
        ck = (
            "off"
            if self.checkpoint_layers == 0
            else (
                "all layers"
                if self.checkpoint_layers >= layers
                else f"{self.checkpoint_layers}/{layers} layers"
            )
        )
        if self.packing_off:
            attn, pack = "SDPA on right-padded rows", f"packing off ({self.packing_off})"
        else:
            attn = f"{self.kernel} varlen" if self.flash else "per-document SDPA"
            pack = "packing on" if self.packing else "packing off"
        fused = ""
        if self.fused_layers:
            fused = (
                f"q/k/v and gate/up fused in {self.fused_layers} layers"
                + ("" if self.lora_in_base else " (LoRA product apart)")
                + ", "
            )
        fp8 = f"base products in float8 ({self.fp8_weights} weights), " if self.fp8_weights else ""
        return (
            f"{self.micro_rows} rows per forward, {pack}, gradient checkpointing {ck}, "
            f"attention {attn}, "
            + fused
            + fp8
            + f"torch.compile {'on' if self.compile else 'off'}, liger {'on' if self.liger else 'off'}, "
            f"cross-entropy {self.ce}, {str(self.dtype).replace('torch.', '')}"
        )


def pick_dtype(cfg: RunConfig, device: torch.device) -> torch.dtype:
    """bfloat16 on CUDA, float32 on CPU, unless RUN.toml says."""
    if cfg.dtype != "auto":
        return getattr(torch, cfg.dtype)
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def liger_available() -> bool:
    """Whether liger-kernel can be imported."""
    try:
        # deferred: liger_kernel, optional (its import is the test of whether it is installed)
        import liger_kernel.transformers  # noqa: F401
    except Exception:
        return False
    return True


class RecipeError(Exception):
    """The configured recipe cannot work (one sentence)."""


def _divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def _peak_of(engine: Any, split: Split, row_ids: list[int]) -> tuple[int, int]:
    torch.cuda.synchronize(engine.device)
    torch.cuda.reset_peak_memory_stats(engine.device)
    base = torch.cuda.memory_allocated(engine.device)
    b = engine.batch(split, [split.rows[i] for i in row_ids])
    loss = engine.loss_sum(b, 1.0 / max(1, b.targets))
    loss.backward()
    torch.cuda.synchronize(engine.device)
    peak = torch.cuda.max_memory_allocated(engine.device) - base
    engine.optimizer.zero_grad(set_to_none=True)
    del loss, b
    return peak, base


def probe_row_bytes(engine: Any, split: Split, row_ids: list[int]) -> tuple[int, int]:
    """(bytes per row, fixed bytes) of a forward and backward, measured eagerly without
    checkpointing on one and on two rows (the loss's logits buffer is per chunk, not per row)."""
    engine.set_recipe(1, 0)
    one, _ = _peak_of(engine, split, row_ids[:1])
    if len(row_ids) < 2:
        per_row, fixed = one, 0
    else:
        two, _ = _peak_of(engine, split, row_ids[:2])
        per_row, fixed = max(two - one, one // 4), max(0, 2 * one - two)
    # the first optimizer step allocates Adam's two moments
    fixed += 2 * sum(p.numel() * 4 for p in engine.params)
    return per_row, fixed


def why(engine: Any) -> str:
    """Why the run attends as it does and may or may not run base_fp8, in one sentence: the
    card's prior (`kernel_choice.choose`), RUN.toml's `attention`, and any trial that failed."""
    r = engine.recipe
    if r.packing_off:
        p = attention.prior(engine.device)
        return (
            f"{kernel_choice.card(attention.capability(engine.device))}: SDPA on padded rows, since "
            f"packing is off; {p.fp8_why}"
        )
    return attention.explain(engine.cfg.attention, engine.device, r.flash, r.kernel)


def line(engine: Any) -> str:
    """The recipe line the run prints and writes to run.json: the recipe, then why."""
    return f"{engine.recipe.describe(len(engine.layers))}; why: {why(engine)}"


def choose(engine: Any, split: Split, row_ids: list[int], log: Callable[..., object]) -> None:
    """Set engine.recipe from RUN.toml where it is explicit, and from free memory where "auto"."""
    cfg = engine.cfg
    layers = len(engine.layers)
    per_step = cfg.rows_per_step
    fixed_micro = cfg.micro_batch if isinstance(cfg.micro_batch, int) else None
    if fixed_micro is not None and per_step % fixed_micro:
        raise RecipeError(
            f"micro_batch = {fixed_micro} does not divide batch_size * grad_accum = {per_step}"
        )
    fixed_ck = (
        None
        if cfg.gradient_checkpointing == "auto"
        else (layers if cfg.gradient_checkpointing else 0)
    )
    if engine.device.type != "cuda":
        micro = fixed_micro or per_step
        engine.set_recipe(micro, fixed_ck or 0)
        log(f"recipe (CPU): {line(engine)}")
        return
    compile_wanted = engine.recipe.compile
    engine.recipe.compile = (
        False  # probe eagerly: compiled steps use no more memory than eager ones
    )
    free, total = torch.cuda.mem_get_info(engine.device)
    per_row, fixed = probe_row_bytes(engine, split, row_ids)
    engine.recipe.compile = compile_wanted
    budget = free * HEADROOM - fixed
    cands = [fixed_micro] if fixed_micro else _divisors_desc(per_step)

    def layers_to_recompute(d: int) -> int:
        # a recomputed layer keeps only its input: about a tenth of what it would hold
        if d * per_row <= budget:
            return 0
        return math.ceil(layers * (1 - budget / (d * per_row)) / 0.9)

    if fixed_ck is not None:
        fits = [d for d in cands if d * per_row * (1 - 0.9 * fixed_ck / layers) <= budget]
        micro, ck = (fits[0] if fits else cands[-1]), fixed_ck
    else:
        # in LoRA the backward costs about one forward, so recomputing a layer costs ~50% of it:
        # no recomputation beats more tokens per forward; recompute as few layers as needed
        free_of_ck = [d for d in cands if layers_to_recompute(d) == 0]
        micro = free_of_ck[0] if free_of_ck else cands[-1]
        ck = layers_to_recompute(micro)
    if engine.world > 1:
        t = torch.tensor([-micro, ck], device=engine.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        micro, ck = int(-t[0]), int(t[1])
    engine.set_recipe(micro, min(ck, layers))
    name = torch.cuda.get_device_name(engine.device)
    log(
        f"recipe for {name} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free, "
        f"{per_row / 2**30:.2f} GiB per {cfg.seq_len}-token row + {fixed / 2**30:.2f} GiB measured): {line(engine)}"
    )


__all__ = ["RecipeError", "choose", "line", "probe_row_bytes", "why"]
