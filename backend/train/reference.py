"""The reference recipe `fleetdeck bench --baseline` measures against: what the operator ran.

transformers Trainer + peft (lora_dropout 0.05), SDPA attention, gradient checkpointing, batch
1 padded to seq_len (one document piece per row), bf16 autocast. Same model shapes, targets,
rank, rows per optimizer step and corpus as the run being benchmarked.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from .corpus import build_splits, read_documents
from .lora import apply_lora, plan_targets
from .models import build_model, load_tokenizer

REFERENCE_DROPOUT = 0.05


class _PaddedRows(torch.utils.data.Dataset):
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


def measure_reference(cfg, steps: int, warmup: int, log) -> dict:
    """Time `warmup + steps` Trainer steps; the timed ones are returned with real-token counts."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tok = load_tokenizer(cfg.base_model, cfg.tokenizer)
    train, _ = build_splits(read_documents(Path(cfg.corpus)), tok, cfg.seq_len, False,
                            cfg.eval_fraction, cfg.seed)
    model = build_model(cfg.base_model, dtype, device, "sdpa", cfg.seed)
    model = apply_lora(model, plan_targets(model, cfg.target_modules), cfg.lora_rank, cfg.lora_alpha,
                       REFERENCE_DROPOUT)
    for m in model.modules():
        if hasattr(m, "cast_input_dtype_enabled"):
            m.cast_input_dtype_enabled = True  # peft's default behaviour
    model.enable_input_require_grads()
    dataset = _PaddedRows(train, cfg.seq_len, tok.pad_id)
    mean_real = train.real_tokens / len(train.rows)
    times: list[float] = []

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

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=1,
            gradient_accumulation_steps=cfg.rows_per_step, max_steps=warmup + steps,
            learning_rate=cfg.lr, bf16=cuda, gradient_checkpointing=True, logging_steps=1,
            save_strategy="no", report_to=[], dataloader_num_workers=0, seed=cfg.seed,
            remove_unused_columns=False, disable_tqdm=True, use_cpu=not cuda)
        trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[Timer()])
        log(f"reference recipe: transformers Trainer + peft (lora_dropout {REFERENCE_DROPOUT}), SDPA, "
            f"gradient checkpointing, batch 1 padded to {cfg.seq_len}, {cfg.rows_per_step} rows per step")
        trainer.train()
    peak = torch.cuda.max_memory_allocated() if cuda else None
    tokens = [round(mean_real * cfg.rows_per_step)] * len(times)
    del trainer, model
    import gc

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {"recipe": "reference", "description": "Trainer + peft, SDPA, gradient checkpointing, batch 1 padded",
            "times": times, "tokens": tokens, "peak": peak, "median": statistics.median(times) if times else None}


__all__ = ["measure_reference", "REFERENCE_DROPOUT"]
