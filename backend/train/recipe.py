"""Choosing the fastest recipe that fits: rows per forward and gradient checkpointing, from a
one-row memory probe against the card's free memory. Measured on an H200: more tokens per
forward and no recomputation are the two largest levers once attention is padding-free."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import attention, kernel_choice
from .corpus import Split

#: share of free memory a step may plan to use (fragmentation, the optimizer's first step)
HEADROOM = 0.85


class RecipeError(Exception):
    """The configured recipe cannot work (one sentence)."""


def _divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def _peak_of(engine, split: Split, row_ids: list[int]) -> tuple[int, int]:
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


def probe_row_bytes(engine, split: Split, row_ids: list[int]) -> tuple[int, int]:
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


def why(engine) -> str:
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


def line(engine) -> str:
    """The recipe line the run prints and writes to run.json: the recipe, then why."""
    return f"{engine.recipe.describe(len(engine.layers))}; why: {why(engine)}"


def choose(engine, split: Split, row_ids: list[int], log) -> None:
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
