"""The training engine: model + LoRA + packed batches + one optimizer step, eval, checkpoints.

`Engine` is shared by `fleetdeck train` and `fleetdeck bench`, so what the bench measures is
what training runs. Data parallelism (torchrun) all-reduces the adapters' gradients once per
optimizer step; the adapters are small, so there is nothing to overlap.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from . import attention, batching, fp8
from .batching import Batch, StepSchedule, linear_cross_entropy, make_batch
from .corpus import Split
from .fused import fuse_projections
from .lora import TargetPlan, apply_lora, lora_parameter_count, matmul_parameter_count, plan_targets
from .models import (
    ModelError,
    build_model,
    final_softcap_refusal,
    is_recurrent,
    layer_kinds,
    packing_refusal,
    set_attention,
    shapes_of,
)
from .recipe import Recipe, liger_available, pick_dtype
from .runconfig import RunConfig

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager


class Engine:
    """A model with LoRA applied, its optimizer and schedule, stepping over a packed split."""

    def __init__(
        self,
        cfg: RunConfig,
        device: torch.device,
        rank: int = 0,
        world: int = 1,
        log: Callable[..., object] = print,
    ) -> None:
        self.cfg, self.device, self.rank, self.world, self.log = cfg, device, rank, world, log
        self.dtype = pick_dtype(cfg, device)
        # the card's prior (kernel_choice: FlashAttention-4 on sm_90/sm_10x where installed, 1.78x
        # torch's bundled flash kernel on an H200), each kernel behind its trial
        flash, kernel, _why = attention.choose_kernel(cfg.attention, device, self.dtype, log)
        name = attention.register(force_flash=flash, kernel=kernel)
        self.kernel = kernel
        batching.FALLBACK_LOG["log"] = log
        self.model = build_model(cfg.base_model, self.dtype, device, name, cfg.seed)
        self.shapes = shapes_of(self.model)
        kinds = layer_kinds(self.model.config)
        #: layers with softmax attention (the MFU formula's attention term counts only these)
        self.attention_layers = sum(k == "attention" for k in kinds) or self.shapes.layers
        #: recurrent layers carry state along the sequence and ignore the attention mask: such a
        #: model gets one document (piece) per row and rows side by side, right-padded, never packed
        self.recurrent = is_recurrent(self.model.config)
        self.padded = self.recurrent
        packing_off = None
        if self.recurrent:
            n_rec = sum(k == "recurrent" for k in kinds)
            packing_off = (
                f"{n_rec} of {len(kinds)} layers are recurrent (linear attention or SSM), whose "
                "state would flow from one packed document into the next; one document per row"
            )
            flash = False
            set_attention(self.model, "sdpa")
            log(f"packing off: {packing_off}")
        refused = None if self.recurrent else packing_refusal(self.model, cfg.seq_len)
        if refused is not None:
            # the packed kernels would silently drop these attention features: such a model gets
            # the padded rows too, through an attention implementation that applies them
            packing_off, eager = refused
            self.padded, flash = True, False
            set_attention(self.model, "eager" if eager else "sdpa")
            log(f"packing off: {packing_off}")
        why = final_softcap_refusal(self.model)
        if why:
            raise ModelError(why)
        self.plan: TargetPlan = plan_targets(self.model, cfg.target_modules)
        self.n_matmul = matmul_parameter_count(self.model)
        # "auto" leaves liger off: on an H200 it gained nothing next to torch.compile, it patches
        # transformers' Qwen3 classes for the whole process, and it broke compiling the 4B shape
        use_liger = cfg.liger is True
        if use_liger and not liger_available():
            raise ImportError("liger = true but liger-kernel is not installed")
        if use_liger:
            self._apply_liger()
        self.model = apply_lora(
            self.model, self.plan, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout
        )
        self.n_lora = lora_parameter_count(self.model)
        fused_layers = 0
        # "auto" fuses on CUDA: on an H200 it gained 2.0% on the 1.7B shape and 0.4% on 0.6B, for
        # 1.8 GiB more at peak (docs/trainer.md); on the CPU it stays off (nothing measured there)
        want_fused = cfg.fused_projections is True or (
            cfg.fused_projections == "auto" and device.type == "cuda"
        )
        lora_in_base = cfg.lora_in_base is not False
        if want_fused and not self.padded:
            counts = fuse_projections(self.model, lora_in_base=lora_in_base)
            fused_layers = max(counts["attention"], counts["mlp"])
        fp8_weights = 0
        if cfg.base_fp8:
            why = fp8.unsupported(device)
            if why:
                raise ModelError(why)
            fp8_weights = fp8.apply_fp8(self.model)
            if fused_layers:
                lora_in_base = False  # a fused group's LoRA product runs apart from its float8 base
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        causal = self.model.get_base_model()
        self.backbone = causal.model
        self.head = causal.get_output_embeddings()
        self.layers = list(self.backbone.layers)
        self.compiled = False
        self._compile_proven = False
        # "auto" leaves a recurrent model eager: its rows come padded to each micro-batch's longest,
        # so every new width recompiled its layers (93 s for the first step of the tiny hybrid on an
        # H200), and transformers' reference linear-attention kernels gain little from compiling
        want_compile = cfg.compile is True or (
            cfg.compile == "auto" and device.type == "cuda" and not self.padded
        )
        if cfg.compile == "auto" and device.type == "cuda" and self.padded:
            log("torch.compile off: the padded rows change width from step to step")
        self.recipe = Recipe(
            micro_rows=1,
            checkpoint_layers=0,
            compile=want_compile,
            liger=use_liger,
            flash=flash,
            dtype=self.dtype,
            packing_off=packing_off,
            packing=cfg.packing and not self.padded,
            kernel=kernel,
            fused_layers=fused_layers,
            ce=batching.ce_kind(device, self.head.weight.shape[0], self.dtype, cfg.cross_entropy),
            lora_in_base=lora_in_base,
            fp8_weights=fp8_weights,
        )
        self.last_lr = cfg.lr
        self.last_attn_sq = 0
        #: (split, rows, micro rows) -> batches built during the previous step
        self._prefetched: tuple | None = None
        self.corpus_facts: dict = {}
        fused = device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            betas=(0.9, 0.999),
            eps=1e-8,
            fused=fused,
        )
        self.max_steps = 1
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)

    def _apply_liger(self) -> None:
        # deferred: liger_kernel, optional (RUN.toml's liger = true)
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3

        apply_liger_kernel_to_qwen3(
            rope=True,
            rms_norm=True,
            swiglu=True,
            cross_entropy=False,
            fused_linear_cross_entropy=False,
            model=self.model,
        )

    def _lr_factor(self, step: int) -> float:
        warm = self.cfg.warmup_steps
        if warm and step < warm:
            return (step + 1) / warm
        return max(0.0, (self.max_steps - step) / max(1, self.max_steps - warm))

    # -- recipe -------------------------------------------------------------------------------
    def set_recipe(self, micro_rows: int, checkpoint_layers: int) -> None:
        """Rows per forward and how many decoder layers recompute in backward."""
        self.recipe.micro_rows = micro_rows
        self.recipe.checkpoint_layers = checkpoint_layers
        from functools import partial

        from torch.utils.checkpoint import checkpoint

        n = len(self.layers)
        chosen = (
            set(round(i * n / checkpoint_layers) for i in range(checkpoint_layers))
            if checkpoint_layers
            else set()
        )
        for i, layer in enumerate(self.layers):
            layer.gradient_checkpointing = i in chosen
            layer._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)
        if self.recipe.compile and not self.compiled:
            import torch._dynamo

            torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
            for layer in self.layers:
                layer.compile(dynamic=None)
            self.compiled = True

    def autocast(self) -> AbstractContextManager[Any]:
        """bfloat16 autocast on CUDA (adapters stay float32); nothing on CPU float32."""
        if self.dtype == torch.float32:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    # -- one step -----------------------------------------------------------------------------
    @property
    def packing(self) -> bool:
        """Whether documents share rows (off for recurrent models, whatever RUN.toml says)."""
        return self.recipe.packing

    def batch(self, split: Split, rows: list[list[tuple[int, int]]]) -> Batch:
        """One micro-batch of `rows` as this model takes it (packed flat, or padded side by side)."""
        # compiled layers: every packed micro-batch as long as a full one (no recompile for a
        # partial last row or a short eval micro-batch)
        full = (
            self.recipe.micro_rows * self.cfg.seq_len
            if self.recipe.compile and not self.padded
            else None
        )
        return make_batch(
            split, rows, self.device, self.cfg.seq_len, padded=self.padded, pad_to=full
        )

    def hidden(self, batch: Batch) -> torch.Tensor:
        """The last hidden state, (tokens, hidden) with padding rows flattened in."""
        out = self.backbone(**batch.model_kwargs()).last_hidden_state
        return out.reshape(-1, out.shape[-1])

    def loss_sum(self, batch: Batch, scale: float) -> torch.Tensor:
        """Scaled summed token cross-entropy of one micro-batch (graph kept for backward)."""
        with self.autocast():
            hidden = self.hidden(batch)
            return linear_cross_entropy(
                hidden,
                self.head.weight,
                batch.labels.reshape(-1),
                scale,
                mode=self.cfg.cross_entropy,
            )

    def _batch_key(self, split: Split, row_ids: list[int]) -> tuple:
        """What a prefetch was built for: the split, the rows and the rows per forward."""
        return id(split), tuple(row_ids), self.recipe.micro_rows

    def _batches(self, split: Split, row_ids: list[int]) -> list[Batch]:
        rows = [split.rows[i] for i in row_ids]
        micro = self.recipe.micro_rows
        return [self.batch(split, rows[i : i + micro]) for i in range(0, len(rows), micro)]

    def step(
        self, split: Split, row_ids: list[int], next_ids: list[int] | None = None
    ) -> tuple[float, int, int]:
        """One optimizer step over `row_ids`: (mean loss over every process, tokens fed, targets).
        With `next_ids`, the next step's batches are built and copied to the GPU while this
        step's work runs there (the GPU never waits for the host between steps)."""
        pre, self._prefetched = self._prefetched, None
        if pre is not None and pre[0] == self._batch_key(split, row_ids):
            batches = pre[1]
        else:
            batches = self._batches(split, row_ids)
        self.last_attn_sq = sum(b.attn_sq for b in batches)
        n_targets = all_targets = sum(b.targets for b in batches)
        if self.world > 1:
            targets = torch.tensor([n_targets], dtype=torch.float64, device=self.device)
            dist.all_reduce(targets)
            all_targets = int(targets.item())
        scale = 1.0 / max(1.0, float(all_targets))
        total = self._forward_backward(batches, scale)
        if self.world > 1:
            self._all_reduce_grads()
            dist.all_reduce(total)
        if self.cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.last_lr = float(self.optimizer.param_groups[0]["lr"])  # the rate this step uses
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if next_ids is not None:
            self._prefetched = (self._batch_key(split, next_ids), self._batches(split, next_ids))
        return float(total.item()), sum(b.tokens for b in batches), n_targets

    def _accumulate(self, batches: list[Batch], scale: float) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        for b in batches:
            loss = self.loss_sum(b, scale)
            loss.backward()
            total += loss.detach()
        return total

    def _forward_backward(self, batches: list[Batch], scale: float) -> torch.Tensor:
        """Forward and backward of every micro-batch; if torch.compile fails on this machine at
        the first step (a new GPU generation, a missing compiler), carry on eagerly."""
        if not self.compiled or self._compile_proven:
            return self._accumulate(batches, scale)
        try:
            total = self._accumulate(batches, scale)
        except Exception as e:  # noqa: BLE001
            if "OutOfMemory" in type(e).__name__:
                raise
            first = (str(e).strip().splitlines() or [""])[0][:200]
            self.log(f"torch.compile failed here ({type(e).__name__}: {first}); running eagerly")
            for layer in self.layers:
                layer._compiled_call_impl = None
            self.compiled = self.recipe.compile = False
            self.optimizer.zero_grad(set_to_none=True)
            total = self._accumulate(batches, scale)
        self._compile_proven = True
        return total

    def _all_reduce_grads(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)  # each process scaled by 1/global targets: the sum is the mean
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    @torch.no_grad()
    def evaluate(self, split: Split) -> float:
        """Mean token loss over the held-out rows (shared among processes)."""
        self.model.eval()
        total = torch.zeros(2, dtype=torch.float64, device=self.device)
        micro = self.recipe.micro_rows
        mine = list(range(self.rank, len(split.rows), self.world))
        for i in range(0, len(mine), micro):
            b = self.batch(split, [split.rows[j] for j in mine[i : i + micro]])
            total[0] += self.loss_sum(b, 1.0).double()
            total[1] += b.targets
        if self.world > 1:
            dist.all_reduce(total)
        self.model.train()
        return float(total[0] / total[1].clamp_min(1))

    # -- checkpoints --------------------------------------------------------------------------
    def save_adapter(self, folder: Path) -> None:
        """adapter_model.safetensors + adapter_config.json (peft's format)."""
        self.model.save_pretrained(str(folder), safe_serialization=True)

    # -- figures ------------------------------------------------------------------------------
    def flops_per_token(self) -> float:
        """4*N_matmul + 6*N_lora + 6*layers*(heads*head_dim)*seq_len: the formula's upper bound, as
        if every token sat in a seq_len-long document; `step_flops` counts the real documents."""
        s = self.shapes
        return (
            4 * self.n_matmul
            + 6 * self.n_lora
            + 6 * self.attention_layers * s.heads * s.head_dim * self.cfg.seq_len
        )

    def step_flops(self, tokens: int, attn_sq: int) -> float:
        """FLOPs of a step of `tokens` real tokens whose ranges' squared lengths sum to `attn_sq`:
        tokens*(4*N_matmul + 6*N_lora) + 6*attention_layers*(heads*head_dim)*sum(n^2) (causal
        attention over each document piece alone, forward and backward)."""
        s = self.shapes
        return (
            tokens * (4 * self.n_matmul + 6 * self.n_lora)
            + 6 * self.attention_layers * s.heads * s.head_dim * attn_sq
        )


def total_steps(cfg: RunConfig, n_rows: int, world: int) -> int:
    """max_steps, else epochs over the rows at batch_size * grad_accum * processes rows per step."""
    if cfg.max_steps > 0:
        return cfg.max_steps
    return max(1, math.ceil(cfg.epochs * n_rows / (cfg.rows_per_step * world)))


def now() -> float:
    """Wall clock for progress lines."""
    return time.time()


__all__ = ["Engine", "StepSchedule", "total_steps"]
