"""The Unsloth process of `fleetdeck bench --references unsloth` (unsloth_reference.py starts it
as `python -m fleetdeck.backend.train.unsloth_process`): it imports Unsloth before transformers,
trl and peft so that Unsloth can patch them, loads the checkpoint the bench wrote, searches the
per-device batch in the trainer, times the steps with the references' StepClock and writes the
result as JSON. Importing this module loads neither torch nor Unsloth."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .unsloth_reference import NAME, OFFLINE_ENV

if TYPE_CHECKING:
    from .runconfig import RunConfig


def piece_lengths(inputs: dict) -> list[int]:
    """Each attended piece's real length in one packed micro-batch as the trainer feeds it:
    Unsloth's `packed_seq_lengths`, else position ids restarting at 0, else reference_rows.fed_lengths."""
    psl = inputs.get("packed_seq_lengths")
    if psl is not None:
        return [
            int(n)
            for n in (psl.flatten().tolist() if hasattr(psl, "flatten") else psl)
            if int(n) > 0
        ]
    pos = inputs.get("position_ids")
    if pos is not None and inputs.get("attention_mask") is None:
        out = []
        for row in pos.tolist():
            starts = [i for i, p in enumerate(row) if p == 0] + [len(row)]
            out += [b - a for a, b in zip(starts, starts[1:], strict=False) if b > a]
        return out
    # deferred: torch, which reference_rows loads (this module answers --help without it)
    from .reference_rows import fed_lengths

    return fed_lengths(inputs)


def _pieces(cfg: RunConfig) -> list[list[int]]:
    """The bench's training rows as their document pieces (the rows every recipe is fed), in
    row order: packing fits them back into `seq_len`-token rows."""
    # deferred: numpy, which corpus loads (this module answers --help without it)
    from .corpus import ByteTokenizer, build_splits, read_documents

    train, _ = build_splits(
        read_documents(Path(cfg.corpus)),
        ByteTokenizer(),
        cfg.seq_len,
        True,
        cfg.eval_fraction,
        cfg.seed,
    )
    full = [r for r in train.rows if sum(e - s for s, e in r) == cfg.seq_len]
    return [train.tokens[s:e].tolist() for r in full for s, e in r]


def _attention_backend() -> str:
    """Which attention Unsloth's packed path can use here (its own flags, read after import)."""
    try:
        ad = importlib.import_module("unsloth.utils.attention_dispatch")

        flash = bool(getattr(ad, "HAS_FLASH_ATTENTION", False))
        xformers = bool(getattr(ad, "HAS_XFORMERS", False))
    except Exception as e:  # noqa: BLE001 - a renamed module: say so rather than guess
        return f"unknown ({type(e).__name__})"
    return (
        "flash-attn 2 varlen"
        if flash
        else "xformers block-diagonal"
        if xformers
        else "PyTorch SDPA"
    )


def child_main(argv: list[str] | None = None) -> int:
    """The Unsloth process: load, patch, search the batch, time the steps, write the result."""
    p = argparse.ArgumentParser(prog="python -m fleetdeck.backend.train.unsloth_process")
    p.add_argument("run_toml")
    p.add_argument(
        "--checkpoint",
        required=True,
        help="a local checkpoint folder (config, safetensors, tokenizer)",
    )
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--checkpointing",
        choices=("off", "unsloth", "true"),
        default="off",
        help="gradient checkpointing: off (then 'unsloth' if batch 1 does not fit), Unsloth's "
        "offloaded mode, or plain",
    )
    p.add_argument(
        "--batch", type=int, default=0, help="a fixed per-device batch instead of the search"
    )
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    # Unsloth before transformers, trl and peft: it patches them as it loads. Unsloth, its trl and
    # datasets are the peer being measured, not fleetdeck's dependencies: no extra installs them,
    # they sit on their own path (PATH_VAR), and NEEDS names each one the bench checks for before
    # this process starts, so they are imported by name here
    unsloth = importlib.import_module("unsloth")
    FastLanguageModel = unsloth.FastLanguageModel
    trl = importlib.import_module("trl")
    SFTConfig, SFTTrainer = trl.SFTConfig, trl.SFTTrainer
    Dataset = importlib.import_module("datasets").Dataset

    # deferred: torch and the reference modules, which load transformers: Unsloth first, above
    import torch

    from .reference_fit import search_batch
    from .reference_trainer import StepClock, counting_trainer
    from .runconfig import load_run_config

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    cfg = load_run_config(args.run_toml)
    pieces = _pieces(cfg)
    dataset = Dataset.from_dict({"input_ids": pieces})
    modes: dict[str, bool | str] = {"off": False, "unsloth": "unsloth", "true": True}
    mode = modes[args.checkpointing]

    def load(gc_mode: bool | str) -> tuple[Any, Any]:
        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=args.checkpoint,
            max_seq_length=cfg.seq_len,
            dtype=torch.bfloat16,
            load_in_4bit=False,
            load_in_8bit=False,
            load_in_16bit=True,
            full_finetuning=False,
            local_files_only=True,
            use_gradient_checkpointing=gc_mode,
            random_state=cfg.seed,
        )
        model = FastLanguageModel.get_peft_model(
            model,
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=list(cfg.target_modules),
            bias="none",
            use_gradient_checkpointing=gc_mode,
            random_state=cfg.seed,
            max_seq_length=cfg.seq_len,
        )
        return model, tokenizer

    t0 = time.perf_counter()
    model, tokenizer = load(mode)
    adapted = sum(1 for n, _ in model.named_modules() if n.endswith(".lora_A"))
    log(
        f"{NAME}: Unsloth {unsloth.__version__} loaded {args.checkpoint} in {time.perf_counter() - t0:.1f} s; "
        f"{adapted} LoRA modules, attention for packed rows: {_attention_backend()}"
    )
    clock = StepClock(args.warmup, True, piece_lengths)
    trainer_cls = counting_trainer(SFTTrainer, clock)

    def run(batch: int, accum: int, n: int, announce: bool = False) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            conf = SFTConfig(
                output_dir=tmp,
                per_device_train_batch_size=batch,
                gradient_accumulation_steps=accum,
                max_steps=n,
                learning_rate=cfg.lr,
                bf16=True,
                logging_steps=1,
                save_strategy="no",
                report_to=[],
                dataloader_num_workers=0,
                seed=cfg.seed,
                packing=True,
                max_length=cfg.seq_len,
                dataset_num_proc=1,
                disable_tqdm=True,
            )
            trainer = trainer_cls(
                model=model,
                args=conf,
                train_dataset=dataset,
                processing_class=tokenizer,
                callbacks=[clock.callback()],
            )
            if announce:
                log(f"{NAME}: batch {batch} x {accum} accumulation, {batch * accum} rows per step")
            try:
                trainer.train()
            finally:
                trainer.model = trainer.model_wrapped = trainer.optimizer = trainer.lr_scheduler = (
                    None
                )
                del trainer

    def trial(b: int) -> float | None:
        clock.restart(1)
        try:
            run(b, 1, 3)
        except torch.cuda.OutOfMemoryError:
            return None
        except Exception as e:  # noqa: BLE001 - said, and this size counts as not running
            first = (str(e).strip().splitlines() or [""])[0][:200]
            if "out of memory" not in first.lower():
                log(f"{NAME}: batch {b} failed in the trainer ({type(e).__name__}: {first})")
            return None
        finally:
            model.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
        return clock.rate()

    search: dict[int, float | None] = {}
    if args.batch:
        batch = args.batch
    else:
        batch, search = search_batch(trial, lambda m: log(m.replace("reference-strong", NAME)))
        if batch is None and mode is False:
            log(
                f"{NAME}: batch 1 does not fit without gradient checkpointing; Unsloth's offloaded mode"
            )
            del model
            torch.cuda.empty_cache()
            mode = "unsloth"
            model, tokenizer = load(mode)
            batch, search = search_batch(trial, log)
        if batch is None:
            raise SystemExit(f"{NAME}: batch 1 does not fit")
    clock.restart(args.warmup)
    accum = max(1, math.ceil(cfg.rows_per_step / batch))
    run(batch, accum, args.warmup + args.steps, announce=True)
    peak = torch.cuda.max_memory_allocated()
    attention = _attention_backend()
    gc_word = {False: "off", True: "on", "unsloth": "Unsloth's offloaded mode"}[mode]
    description = (
        f"Unsloth {unsloth.__version__} FastLanguageModel (16-bit LoRA) + trl SFTTrainer, sample packing "
        f"(no padding), attention {attention}, lora_dropout {cfg.lora_dropout:g}, gradient "
        f"checkpointing {gc_word}, batch {batch} x {accum} accumulation"
        + (" (searched in the trainer)" if search else "")
        + ", bf16"
    )
    out = {
        "recipe": NAME,
        "description": description,
        "times": clock.times,
        "tokens": clock.tokens,
        "attn_sq": clock.attn_sq,
        "peak": peak,
        "batch": batch,
        "gradient_checkpointing": gc_word,
        "lora_dropout": cfg.lora_dropout,
        "rows_per_step": batch * accum,
        "attention": attention,
        "adapted_modules": adapted,
        "unsloth_version": unsloth.__version__,
        "batch_search": {
            str(b): (round(v, 1) if v is not None else None) for b, v in search.items()
        },
    }
    Path(args.out).write_text(json.dumps(out))
    return 0


__all__ = ["child_main", "piece_lengths"]


if __name__ == "__main__":
    sys.exit(child_main())
