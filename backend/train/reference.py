"""The references `fleetdeck bench --baseline` measures against, all plain transformers Trainer +
peft on the run's model shapes, targets, rank and corpus:

- `reference-strong`: the strongest plain configuration a practitioner would set up: the
  Trainer's `use_liger_kernel=True` (Liger's RMSNorm, SwiGLU, RoPE and fused linear
  cross-entropy) where liger-kernel is installed; rows without padding: documents flattened
  by transformers' `DataCollatorWithFlattening` (position ids restart per document, the flash
  varlen arguments passed along) where the attention implementation honours it
  (`flash_attention_4` or `_2` when installed), otherwise dense `seq_len`-token rows cut from
  the same token stream (SDPA with no mask: its flash kernel); the run's lora_dropout; no
  gradient checkpointing; peft's float32 input cast off; `expandable_segments` on; the
  per-device batch searched by timing the Trainer itself at each size (any size, not only
  divisors of the rows per step) until it runs out of memory or stops gaining. The headline
  ratio is against this one.
- `reference-plain`: a plain Trainer + peft on padded rows, kept for comparison: rows padded to
  the longest row of the batch (which moves SDPA off its flash kernel), no Liger, the batch
  picked by a bare-model memory probe among divisors of the rows per step.
- `reference`: the operator's old recipe: lora_dropout 0.05, gradient checkpointing, batch 1
  padded to seq_len (one document piece per row), SDPA, bf16.

Tokens are counted from what the Trainer actually fed (attention masks, flattened sequence
lengths, or full dense rows: never padding), and each attended piece's length gives the
attention term of its FLOPs (a dense row attends across its whole length).
"""

from __future__ import annotations

import gc
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .corpus import build_splits, read_documents
from .models import load_tokenizer
from .reference_fit import (
    build_reference_model,
    expandable_segments,
    liger_ready,
    search_batch,
    strong_attention,
    strongest_fit,
)
from .reference_rows import (
    DenseRows,
    DocumentRows,
    PaddedRows,
    collate_to_longest,
    fed_lengths,
    flattening_collator,
)
from .reference_trainer import StepClock, counting_trainer, run_trainer
from .runconfig import RunConfig

if TYPE_CHECKING:
    from collections.abc import Callable

REFERENCE_DROPOUT = 0.05
#: the recipes, in the order the bench reports them (it runs them in reverse), by the
#: `--references` name that selects each; `unsloth` runs in its own process (unsloth_reference.py)
RECIPES = {
    "strong": "reference-strong",
    "plain": "reference-plain",
    "old": "reference",
    "unsloth": "unsloth",
}


@dataclass
class _Setup:
    """One reference's model and rows, and what it chose: the facts its description says."""

    kind: str
    cfg: RunConfig
    device: torch.device
    dtype: torch.dtype
    dropout: float
    expandable: bool
    liger: bool
    model: Any = None
    dataset: Any = None
    collator: Any = None
    attn: str = "sdpa"
    rows_how: str = ""
    batch: int = 1
    accum: int = 1
    checkpointing: bool = True
    search: dict = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def _set_up(cfg: RunConfig, kind: str, log: Callable[..., object]) -> _Setup:
    """The reference's model on the card and its rows, fed as its recipe feeds them."""
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = device.type == "cuda"
    strong = kind == "strong"
    tok = load_tokenizer(cfg.base_model, cfg.tokenizer)
    s = _Setup(
        kind=kind,
        cfg=cfg,
        device=device,
        dtype=torch.bfloat16 if cuda else torch.float32,
        dropout=REFERENCE_DROPOUT if kind == "old" else cfg.lora_dropout,
        expandable=strong and cuda and expandable_segments(True),
        liger=False,
    )
    train, _ = build_splits(
        read_documents(Path(cfg.corpus)), tok, cfg.seq_len, strong, cfg.eval_fraction, cfg.seed
    )
    s.model = build_reference_model(cfg, device, s.dtype, s.dropout, cast_input=not strong)
    s.liger = strong and liger_ready(cuda)
    if not strong:
        s.dataset = PaddedRows(train, cfg.seq_len, tok.pad_id)
        s.collator = collate_to_longest if kind == "plain" else None
        return s
    docs = DocumentRows(train, cfg.seq_len)
    if len(docs) == 0:
        raise ValueError(f"reference-strong: the corpus fills no {cfg.seq_len}-token row")
    s.attn = strong_attention(s.model, device, s.dtype, docs, log)
    if s.attn == "sdpa":
        s.dataset = DenseRows(train, cfg.seq_len)
        s.rows_how = (
            f"dense {cfg.seq_len}-token rows cut from the token stream (no padding, no mask)"
        )
    else:
        s.dataset, s.collator = docs, flattening_collator()
        s.rows_how = "documents flattened by DataCollatorWithFlattening (no padding)"
    if not s.liger:
        log("reference-strong: liger-kernel not usable here; Liger off")
    return s


def _search_strong(
    s: _Setup, trainer_cls: type, clock: StepClock, warmup: int, log: Callable[..., object]
) -> None:
    """reference-strong's per-device batch, searched by timing the Trainer itself at each size;
    batch 1 with gradient checkpointing where even batch 1 runs out of memory without it."""
    s.checkpointing = False
    if not s.cuda:
        s.batch = s.cfg.rows_per_step  # no memory to search on the CPU
        return

    def trial(b: int, model: Any = s.model) -> float | None:
        clock.restart(1)
        try:
            run_trainer(
                trainer_cls, model, s.dataset, s.cfg, b, 1, False, 3, True, s.collator, clock,
                s.liger, None,
            )  # fmt: skip
        except torch.cuda.OutOfMemoryError:
            return None
        except Exception as e:  # noqa: BLE001 - said, and this size counts as not running
            first = (str(e).strip().splitlines() or [""])[0][:200]
            log(f"reference-strong: batch {b} failed in the Trainer ({type(e).__name__}: {first})")
            return None
        finally:
            gc.collect()
            torch.cuda.empty_cache()
        return clock.rate()

    batch, s.search = search_batch(trial, log)
    clock.restart(warmup)
    if batch is None:
        log("reference-strong: batch 1 runs out of memory without gradient checkpointing; with it")
        batch, s.checkpointing = 1, True
        s.model.enable_input_require_grads()
    s.batch = batch


def _choose_batch(
    s: _Setup, trainer_cls: type, clock: StepClock, warmup: int, log: Callable[..., object]
) -> None:
    if s.kind == "strong":
        _search_strong(s, trainer_cls, clock, warmup, log)
    elif s.kind == "plain":
        s.batch, s.checkpointing = strongest_fit(
            s.cfg, s.model, s.dataset, s.device, s.dtype, log, _BELOW.get("plain")
        )
        if s.checkpointing:
            s.model.enable_input_require_grads()
    else:
        s.batch, s.checkpointing = 1, True
        s.model.enable_input_require_grads()
    s.accum = max(1, math.ceil(s.cfg.rows_per_step / s.batch))
    if s.kind == "plain":
        s.accum = s.cfg.rows_per_step // s.batch


def _describe(s: _Setup) -> str:
    precision = "bf16" if s.cuda else "fp32"
    checkpointing = f"gradient checkpointing {'on' if s.checkpointing else 'off'}"
    batch = f"batch {s.batch} x {s.accum} accumulation"
    if s.kind != "strong":
        padding = (
            "padded to the longest row of the batch"
            if s.kind == "plain"
            else f"padded to {s.cfg.seq_len}"
        )
        return (
            f"Trainer + peft, lora_dropout {s.dropout:g}, SDPA, {checkpointing}, {batch}, "
            f"{padding}, {precision}"
        )
    parts = [
        f"Liger {'on' if s.liger else 'off'}",
        f"attention {s.attn}",
        s.rows_how,
        f"lora_dropout {s.dropout:g}",
        checkpointing,
        batch + (" (searched in the Trainer)" if s.search else ""),
        "peft input cast off",
        f"expandable_segments {'on' if s.expandable else 'off'}",
        precision,
    ]
    return "Trainer + peft, " + ", ".join(parts)


def measure_reference(
    cfg: RunConfig, steps: int, warmup: int, log: Callable[..., object], kind: str = "old"
) -> dict:
    """Time `warmup + steps` Trainer steps of one reference (`kind`: strong, plain or old); the
    timed ones are returned with the real tokens and the sum of squared piece lengths each step fed."""
    # deferred: transformers (seconds at start-up)
    from transformers import Trainer

    name = RECIPES[kind]
    s = _set_up(cfg, kind, log)
    clock = StepClock(warmup, s.cuda, fed_lengths)
    trainer_cls = counting_trainer(Trainer, clock)
    _choose_batch(s, trainer_cls, clock, warmup, log)
    description = _describe(s)
    out_of_memory = False
    try:
        run_trainer(
            trainer_cls, s.model, s.dataset, cfg, s.batch, s.accum, s.checkpointing,
            warmup + steps, s.cuda, s.collator, clock, s.liger,
            (log, f"{name}: {description}, {s.batch * s.accum} rows per step"),
        )  # fmt: skip
    except torch.cuda.OutOfMemoryError:
        if kind != "plain" or (s.batch == 1 and s.checkpointing):
            raise
        out_of_memory = True
    finally:
        if s.expandable:
            expandable_segments(False)
    if out_of_memory:
        log(f"{name}: batch {s.batch} ran out of memory in the Trainer; one size down")
        s.model = None
        gc.collect()
        torch.cuda.empty_cache()
        return _retry(cfg, steps, warmup, log, (s.batch, s.checkpointing))
    peak = torch.cuda.max_memory_allocated() if s.cuda else None
    s.model = None
    gc.collect()
    if s.cuda:
        torch.cuda.empty_cache()
    out = {
        "recipe": name,
        "description": description,
        "times": clock.times,
        "tokens": clock.tokens,
        "attn_sq": clock.attn_sq,
        "peak": peak,
        "batch": s.batch,
        "gradient_checkpointing": s.checkpointing,
        "lora_dropout": s.dropout,
        "rows_per_step": s.batch * s.accum,
        "median": statistics.median(clock.times) if clock.times else None,
    }
    if kind == "strong":
        out.update(
            {
                "liger": s.liger,
                "attention": s.attn,
                "expandable_segments": s.expandable,
                "batch_search": {
                    str(b): (round(v, 1) if v is not None else None) for b, v in s.search.items()
                },
            }
        )
    return out


_BELOW: dict[str, tuple[int, bool]] = {}


def _retry(
    cfg: RunConfig,
    steps: int,
    warmup: int,
    log: Callable[..., object],
    failed: tuple[int, bool],
) -> dict:
    _BELOW["plain"] = failed
    try:
        return measure_reference(cfg, steps, warmup, log, kind="plain")
    finally:
        _BELOW.pop("plain", None)


__all__ = [
    "RECIPES",
    "REFERENCE_DROPOUT",
    "measure_reference",
]
