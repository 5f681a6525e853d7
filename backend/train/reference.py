"""The references `fleetdeck bench --baseline` measures against, both plain transformers Trainer +
peft on the run's model shapes, targets, rank, rows per optimizer step and corpus:

- `reference`: the operator's old recipe: lora_dropout 0.05, gradient checkpointing, batch 1
  padded to seq_len (one document piece per row), SDPA, bf16.
- `reference-strong`: the strongest plain configuration that fits this card: the run's own
  lora_dropout, no gradient checkpointing when a batch fits without it, the largest per-device
  batch (a divisor of the rows per step) that fits, rows padded only to the longest in the
  batch, SDPA, bf16. The headline ratio is against this one.

Tokens are counted from the attention masks the Trainer actually fed (real tokens, no padding),
and each row's real length gives the attention term of its FLOPs.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from pathlib import Path

import torch

from .corpus import build_splits, read_documents
from .lora import apply_lora, plan_targets
from .models import build_model, load_tokenizer

REFERENCE_DROPOUT = 0.05
#: a probe's peak may use at most this share of the card's memory (the Trainer adds only the
#: adapters' optimizer state; a timed run that still runs out of memory retries one size down)
FIT_SHARE = 0.97


class _PaddedRows(torch.utils.data.Dataset):
    """One document piece per row, padded to seq_len (`pad_to_longest` leaves that to collate)."""

    def __init__(self, split, seq_len: int, pad_id: int):
        self.split, self.seq_len, self.pad_id = split, seq_len, pad_id
        self.flat = torch.frombuffer(split.tokens, dtype=torch.int32)

    def __len__(self) -> int:
        return len(self.split.rows)

    def __getitem__(self, i: int) -> dict:
        (s, e), = self.split.rows[i]
        ids = torch.full((self.seq_len,), self.pad_id, dtype=torch.long)
        ids[: e - s] = self.flat[s:e].long()
        mask = torch.zeros(self.seq_len, dtype=torch.long)
        mask[: e - s] = 1
        labels = ids.clone()
        labels[mask == 0] = -100
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _collate_to_longest(items: list[dict]) -> dict:
    width = max(int(x["attention_mask"].sum()) for x in items)
    return {k: torch.stack([x[k][:width] for x in items]) for k in items[0]}


def _build(cfg, device, dtype, dropout: float):
    model = build_model(cfg.base_model, dtype, device, "sdpa", cfg.seed)
    model = apply_lora(model, plan_targets(model, cfg.target_modules), cfg.lora_rank, cfg.lora_alpha, dropout)
    for m in model.modules():
        if hasattr(m, "cast_input_dtype_enabled"):
            m.cast_input_dtype_enabled = True  # peft's default behaviour
    return model


def _fits(model, dataset, batch: int, checkpointing: bool, device, dtype, log) -> int | None:
    """Peak bytes of one forward and backward of `batch` full-length rows, None on out of memory."""
    rows = _collate_to_longest([dataset[i % len(dataset)] for i in range(batch)])
    rows = {k: v.to(device) for k, v in rows.items()}
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    else:
        model.gradient_checkpointing_disable()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        with torch.autocast("cuda", dtype=dtype):
            loss = model(**rows).loss
        loss.backward()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    except torch.cuda.OutOfMemoryError:
        peak = None
        log(f"reference-strong: batch {batch} {'with' if checkpointing else 'without'} gradient checkpointing "
            "ran out of memory in its probe")
    finally:
        loss = None  # noqa: F841
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(device).total_memory
    if peak is not None and peak > FIT_SHARE * total:
        log(f"reference-strong: batch {batch} peaked at {peak / 2**30:.1f} GiB of {total / 2**30:.1f}, "
            f"over {100 * FIT_SHARE:.0f}%")
        return None
    return peak


def strongest_fit(cfg, model, dataset, device, dtype, log, below: tuple[int, bool] | None = None) -> tuple[int, bool]:
    """(per-device batch, gradient checkpointing): the largest divisor of the rows per step that
    fits without checkpointing, else the largest that fits with it; `below`: a choice that ran
    out of memory in the timed run, to start under."""
    per_step = cfg.rows_per_step
    cands = [d for d in range(per_step, 0, -1) if per_step % d == 0]
    if device.type != "cuda":
        return cands[0], False
    for ck in (False, True):
        for b in cands:
            if below is not None and (ck, -b) <= (below[1], -below[0]):
                continue
            peak = _fits(model, dataset, b, ck, device, dtype, log)
            if peak is not None:
                log(f"reference-strong: batch {b} fits {'with' if ck else 'without'} gradient checkpointing "
                    f"(probe peak {peak / 2**30:.1f} GiB)")
                return b, ck
            log(f"reference-strong: batch {b} does not fit {'with' if ck else 'without'} gradient checkpointing")
    return 1, True


def measure_reference(cfg, steps: int, warmup: int, log, strong: bool = False) -> dict:
    """Time `warmup + steps` Trainer steps of one reference; the timed ones are returned with
    the real tokens and the sum of squared row lengths each step fed."""
    from transformers import Trainer, TrainerCallback

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tok = load_tokenizer(cfg.base_model, cfg.tokenizer)
    train, _ = build_splits(read_documents(Path(cfg.corpus)), tok, cfg.seq_len, False,
                            cfg.eval_fraction, cfg.seed)
    dropout = cfg.lora_dropout if strong else REFERENCE_DROPOUT
    model = _build(cfg, device, dtype, dropout)
    dataset = _PaddedRows(train, cfg.seq_len, tok.pad_id)
    if strong:
        batch, checkpointing = strongest_fit(cfg, model, dataset, device, dtype, log, _BELOW.get("strong"))
    else:
        batch, checkpointing = 1, True
    if checkpointing:
        model.enable_input_require_grads()
    accum = cfg.rows_per_step // batch
    times: list[float] = []
    step_tokens: list[int] = []
    step_sq: list[int] = []
    fed = {"tokens": 0, "sq": 0}

    class Counting(Trainer):
        def training_step(self, model, inputs, *a, **kw):
            lengths = inputs["attention_mask"].sum(dim=1)
            fed["tokens"] += int(lengths.sum())
            fed["sq"] += int((lengths.long() ** 2).sum())
            return super().training_step(model, inputs, *a, **kw)

    class Timer(TrainerCallback):
        t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step == warmup and cuda:
                torch.cuda.reset_peak_memory_stats()
            Timer.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step > warmup:
                times.append(time.perf_counter() - Timer.t0)
                step_tokens.append(fed["tokens"])
                step_sq.append(fed["sq"])
            fed["tokens"] = fed["sq"] = 0

    name = "reference-strong" if strong else "reference"
    padding = "padded to the longest row of the batch" if strong else f"padded to {cfg.seq_len}"
    description = (f"Trainer + peft, lora_dropout {dropout:g}, SDPA, gradient checkpointing "
                   f"{'on' if checkpointing else 'off'}, batch {batch} x {accum} accumulation, {padding}, "
                   f"{'bf16' if cuda else 'fp32'}")
    out_of_memory = False
    try:
        _run_trainer(Counting, model, dataset, cfg, batch, accum, checkpointing, warmup, steps, cuda, strong, Timer,
                     log, f"{name}: {description}, {cfg.rows_per_step} rows per step")
    except torch.cuda.OutOfMemoryError:
        if not strong or (batch == 1 and checkpointing):
            raise
        out_of_memory = True
    if out_of_memory:
        log(f"{name}: batch {batch} ran out of memory in the Trainer; one size down")
        del model
        gc.collect()
        torch.cuda.empty_cache()
        return _retry(cfg, steps, warmup, log, (batch, checkpointing))
    peak = torch.cuda.max_memory_allocated() if cuda else None
    del model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {"recipe": name, "description": description, "times": times, "tokens": step_tokens,
            "attn_sq": step_sq, "peak": peak, "batch": batch, "gradient_checkpointing": checkpointing,
            "lora_dropout": dropout, "median": statistics.median(times) if times else None}


_BELOW: dict[str, tuple[int, bool]] = {}


def _retry(cfg, steps, warmup, log, failed: tuple[int, bool]) -> dict:
    _BELOW["strong"] = failed
    try:
        return measure_reference(cfg, steps, warmup, log, strong=True)
    finally:
        _BELOW.pop("strong", None)


def _run_trainer(trainer_cls, model, dataset, cfg, batch, accum, checkpointing, warmup, steps, cuda, strong, timer,
                 log, line) -> None:
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=batch,
            gradient_accumulation_steps=accum, max_steps=warmup + steps,
            learning_rate=cfg.lr, bf16=cuda, gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
            logging_steps=1, save_strategy="no", report_to=[], dataloader_num_workers=0, seed=cfg.seed,
            remove_unused_columns=False, disable_tqdm=True, use_cpu=not cuda)
        trainer = trainer_cls(model=model, args=args, train_dataset=dataset, callbacks=[timer()],
                              data_collator=_collate_to_longest if strong else None)
        log(line)
        try:
            trainer.train()
        finally:
            trainer.model = trainer.model_wrapped = trainer.optimizer = None


__all__ = ["measure_reference", "strongest_fit", "REFERENCE_DROPOUT"]
