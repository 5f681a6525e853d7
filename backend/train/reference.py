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
import tempfile
import time
from pathlib import Path

import torch

from .corpus import build_splits, read_documents
from .lora import apply_lora, plan_targets
from .models import build_model, load_tokenizer

REFERENCE_DROPOUT = 0.05
#: a probe's peak may use at most this share of the card's memory (reference-plain's bare-model
#: probe; a timed run that still runs out of memory retries one size down)
FIT_SHARE = 0.97
#: the recipes, in the order the bench reports them (it runs them in reverse), by the
#: `--references` name that selects each; `unsloth` runs in its own process (unsloth_reference.py)
RECIPES = {
    "strong": "reference-strong",
    "plain": "reference-plain",
    "old": "reference",
    "unsloth": "unsloth",
}
#: the largest per-device batch reference-strong's search tries
MAX_SEARCH_BATCH = 128


class _PaddedRows(torch.utils.data.Dataset):
    """One document piece per row, padded to seq_len (`pad_to_longest` leaves that to collate)."""

    def __init__(self, split, seq_len: int, pad_id: int):
        self.split, self.seq_len, self.pad_id = split, seq_len, pad_id
        self.flat = torch.frombuffer(split.tokens, dtype=torch.int32)

    def __len__(self) -> int:
        return len(self.split.rows)

    def __getitem__(self, i: int) -> dict:
        ((s, e),) = self.split.rows[i]
        ids = torch.full((self.seq_len,), self.pad_id, dtype=torch.long)
        ids[: e - s] = self.flat[s:e].long()
        mask = torch.zeros(self.seq_len, dtype=torch.long)
        mask[: e - s] = 1
        labels = ids.clone()
        labels[mask == 0] = -100
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class _FullRows(torch.utils.data.Dataset):
    """The packed rows that hold exactly `seq_len` tokens, over the split's token stream."""

    def __init__(self, split, seq_len: int):
        self.flat = torch.frombuffer(split.tokens, dtype=torch.int32)
        self.rows = [r for r in split.rows if sum(e - s for s, e in r) == seq_len]

    def __len__(self) -> int:
        return len(self.rows)


class _DenseRows(_FullRows):
    """Full `seq_len`-token rows cut from the packed token stream: no padding, no mask, attention
    runs across the whole row (documents separated only by their end-of-text tokens)."""

    def __getitem__(self, i: int) -> dict:
        ids = torch.cat([self.flat[s:e] for s, e in self.rows[i]]).long()
        return {"input_ids": ids, "labels": ids.clone()}


class _DocumentRows(_FullRows):
    """The packed rows' document pieces, for `DataCollatorWithFlattening`: a micro-batch of b
    rows is flattened into one sequence of their pieces (b x seq_len tokens, as fleetdeck's)."""

    def __getitem__(self, i: int) -> dict:
        return {"pieces": [self.flat[s:e].tolist() for s, e in self.rows[i]]}


def _flattening_collator():
    from transformers import DataCollatorWithFlattening

    inner = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)

    def collate(items: list[dict]) -> dict:
        return inner([{"input_ids": p} for x in items for p in x["pieces"]])

    return collate


def _collate_to_longest(items: list[dict]) -> dict:
    width = max(int(x["attention_mask"].sum()) for x in items)
    return {k: torch.stack([x[k][:width] for x in items]) for k in items[0]}


def fed_lengths(inputs: dict) -> list[int]:
    """The real length of each attended piece of one micro-batch as the Trainer feeds it: an
    attention mask's rows, a flattened batch's documents, or full dense rows."""
    if "attention_mask" in inputs and inputs["attention_mask"] is not None:
        return [int(n) for n in inputs["attention_mask"].sum(dim=1).tolist()]
    cu = inputs.get("cu_seq_lens_q")
    if cu is not None:
        cu = [int(c) for c in (cu.tolist() if hasattr(cu, "tolist") else cu)]
        return [b - a for a, b in zip(cu, cu[1:], strict=False)]
    ids = inputs["input_ids"]
    return [int(ids.shape[1])] * int(ids.shape[0])


def _build(cfg, device, dtype, dropout: float, cast_input: bool = True):
    model = build_model(cfg.base_model, dtype, device, "sdpa", cfg.seed)
    model = apply_lora(
        model, plan_targets(model, cfg.target_modules), cfg.lora_rank, cfg.lora_alpha, dropout
    )
    for m in model.modules():
        if hasattr(m, "cast_input_dtype_enabled"):
            # peft's default casts each adapter's input to the adapter's float32; under bf16 autocast
            # the matmul runs in bf16 anyway, so reference-strong turns the copy off
            m.cast_input_dtype_enabled = cast_input
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
        log(
            f"reference-plain: batch {batch} {'with' if checkpointing else 'without'} gradient checkpointing "
            "ran out of memory in its probe"
        )
    finally:
        loss = None  # noqa: F841
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(device).total_memory
    if peak is not None and peak > FIT_SHARE * total:
        log(
            f"reference-plain: batch {batch} peaked at {peak / 2**30:.1f} GiB of {total / 2**30:.1f}, "
            f"over {100 * FIT_SHARE:.0f}%"
        )
        return None
    return peak


def strongest_fit(
    cfg, model, dataset, device, dtype, log, below: tuple[int, bool] | None = None
) -> tuple[int, bool]:
    """reference-plain's (per-device batch, gradient checkpointing): the largest divisor of the
    rows per step that fits without checkpointing in a bare-model probe, else the largest that
    fits with it; `below`: a choice that ran out of memory in the timed run, to start under."""
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
                log(
                    f"reference-plain: batch {b} fits {'with' if ck else 'without'} gradient checkpointing "
                    f"(probe peak {peak / 2**30:.1f} GiB)"
                )
                return b, ck
            log(
                f"reference-plain: batch {b} does not fit {'with' if ck else 'without'} gradient checkpointing"
            )
    return 1, True


def search_batch(
    trial, log, limit: int = MAX_SEARCH_BATCH
) -> tuple[int | None, dict[int, float | None]]:
    """The per-device batch with the most tokens/s, `trial(b)` giving a batch's tokens/s or None
    when it runs out of memory: sizes double from 1 until one runs out of memory, passes
    `limit`, or two in a row gain under 2% on the best; then the sizes halfway to the next one
    up (when that one was not better) and to the one below. Returns (best or None, every size's
    figure)."""
    seen: dict[int, float | None] = {}

    def run(b: int) -> float | None:
        if b not in seen:
            seen[b] = trial(b)
            figure = "out of memory" if seen[b] is None else f"{seen[b]:,.0f} tok/s"
            log(f"reference-strong: batch search: batch {b}: {figure}")
        return seen[b]

    def best() -> int | None:
        fits = {b: v for b, v in seen.items() if v is not None}
        return max(fits, key=lambda b: fits[b]) if fits else None

    b, flat = 1, 0
    while b <= limit:
        before = best()
        v = run(b)
        if v is None:
            break
        flat = flat + 1 if before is not None and v < 1.02 * seen[before] else 0  # type: ignore[operator]
        if flat >= 2:
            break
        b *= 2
    top = best()
    if top is not None:
        up = top * 2
        above = (top + up) // 2
        if above <= limit and (up not in seen or seen[up] is None or seen[up] < seen[top]):  # type: ignore[operator]
            run(above)
        below = (top // 2 + top) // 2
        if top > 2 and below != top and below not in seen:
            run(below)
    return best(), seen


def _strong_attention(model, device, dtype, dataset_docs, log) -> str:
    """The fastest attention implementation transformers runs here that honours flattened
    documents (FlashAttention-4, then -2), after a trial forward and backward; else SDPA."""
    if device.type != "cuda":
        return "sdpa"
    from transformers.utils import import_utils

    cands = [
        name
        for name, check in (
            ("flash_attention_4", "is_flash_attn_4_available"),
            ("flash_attention_2", "is_flash_attn_2_available"),
        )
        if getattr(import_utils, check, lambda: False)()
    ]
    if not cands:
        log("reference-strong: no flash attention package transformers can use; dense rows on SDPA")
    collate = _flattening_collator()
    for name in cands:
        try:
            _set_attn(model, name)
            inputs = {
                k: (v.to(device) if torch.is_tensor(v) else v)
                for k, v in collate([dataset_docs[0], dataset_docs[1 % len(dataset_docs)]]).items()
            }
            with torch.autocast("cuda", dtype=dtype):
                loss = model(**inputs).loss
            loss.backward()
            if not torch.isfinite(loss):
                raise RuntimeError(f"loss {float(loss)}")
            model.zero_grad(set_to_none=True)
            return name
        except Exception as e:  # noqa: BLE001 - any failure means the next candidate
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            log(
                f"reference-strong: attention {name} failed its trial ({type(e).__name__}: {first}); next"
            )
            model.zero_grad(set_to_none=True)
    _set_attn(model, "sdpa")
    return "sdpa"


def _set_attn(model, name: str) -> None:
    from .models import set_attention

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(inner, "set_attn_implementation"):
        inner.set_attn_implementation(name)
    set_attention(inner, name)


def _expandable_segments(on: bool) -> bool:
    """Switch the CUDA caching allocator's expandable segments; whether it could."""
    try:
        torch.cuda.memory._set_allocator_settings(
            f"expandable_segments:{'True' if on else 'False'}"
        )
        return True
    except Exception:  # noqa: BLE001 - an older torch or no CUDA: the reference runs without
        return False


def _liger_ready(cuda: bool) -> bool:
    if not cuda:
        return False
    try:
        from transformers.utils import is_liger_kernel_available

        return bool(is_liger_kernel_available())
    except ImportError:
        return False


def measure_reference(cfg, steps: int, warmup: int, log, kind: str = "old") -> dict:
    """Time `warmup + steps` Trainer steps of one reference (`kind`: strong, plain or old); the
    timed ones are returned with the real tokens and the sum of squared piece lengths each step fed."""
    from transformers import Trainer, TrainerCallback

    name = RECIPES[kind]
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tok = load_tokenizer(cfg.base_model, cfg.tokenizer)
    strong = kind == "strong"
    expandable = strong and cuda and _expandable_segments(True)
    dropout = REFERENCE_DROPOUT if kind == "old" else cfg.lora_dropout
    train, _ = build_splits(
        read_documents(Path(cfg.corpus)), tok, cfg.seq_len, strong, cfg.eval_fraction, cfg.seed
    )
    model = _build(cfg, device, dtype, dropout, cast_input=not strong)
    liger = strong and _liger_ready(cuda)
    collator = None
    if strong:
        docs = _DocumentRows(train, cfg.seq_len)
        if len(docs) == 0:
            raise ValueError(f"reference-strong: the corpus fills no {cfg.seq_len}-token row")
        attn = _strong_attention(model, device, dtype, docs, log)
        if attn == "sdpa":
            dataset = _DenseRows(train, cfg.seq_len)
            rows_how = (
                f"dense {cfg.seq_len}-token rows cut from the token stream (no padding, no mask)"
            )
        else:
            dataset, collator = docs, _flattening_collator()
            rows_how = "documents flattened by DataCollatorWithFlattening (no padding)"
        if not liger:
            log("reference-strong: liger-kernel not usable here; Liger off")
    else:
        dataset = _PaddedRows(train, cfg.seq_len, tok.pad_id)
        collator = _collate_to_longest if kind == "plain" else None
        attn = "sdpa"
    times: list[float] = []
    step_tokens: list[int] = []
    step_sq: list[int] = []
    fed = {"tokens": 0, "sq": 0}

    class Counting(Trainer):
        def training_step(self, model, inputs, *a, **kw):
            lengths = fed_lengths(inputs)
            fed["tokens"] += sum(lengths)
            fed["sq"] += sum(n * n for n in lengths)
            return super().training_step(model, inputs, *a, **kw)

    class Timer(TrainerCallback):
        t0 = 0.0
        skip = warmup

        def on_step_begin(self, args, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step == Timer.skip and cuda:
                torch.cuda.reset_peak_memory_stats()
            Timer.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step > Timer.skip:
                times.append(time.perf_counter() - Timer.t0)
                step_tokens.append(fed["tokens"])
                step_sq.append(fed["sq"])
            fed["tokens"] = fed["sq"] = 0

    search: dict[int, float | None] = {}
    if strong:
        checkpointing = False
        if cuda:

            def trial(b: int, model=model) -> float | None:
                times.clear()
                step_tokens.clear()
                step_sq.clear()
                Timer.skip = 1
                try:
                    _run_trainer(
                        Counting,
                        model,
                        dataset,
                        cfg,
                        b,
                        1,
                        False,
                        1,
                        2,
                        cuda,
                        collator,
                        Timer,
                        liger,
                        None,
                    )
                except torch.cuda.OutOfMemoryError:
                    return None
                except Exception as e:  # noqa: BLE001 - said, and this size counts as not running
                    first = (str(e).strip().splitlines() or [""])[0][:200]
                    log(
                        f"reference-strong: batch {b} failed in the Trainer ({type(e).__name__}: {first})"
                    )
                    return None
                finally:
                    gc.collect()
                    torch.cuda.empty_cache()
                return sum(step_tokens) / sum(times) if times else None

            batch, search = search_batch(trial, log)
            times.clear()
            step_tokens.clear()
            step_sq.clear()
            Timer.skip = warmup
            if batch is None:
                log(
                    "reference-strong: batch 1 runs out of memory without gradient checkpointing; with it"
                )
                batch, checkpointing = 1, True
                model.enable_input_require_grads()
        else:
            batch = cfg.rows_per_step  # no memory to search on the CPU
    elif kind == "plain":
        batch, checkpointing = strongest_fit(
            cfg, model, dataset, device, dtype, log, _BELOW.get("plain")
        )
        if checkpointing:
            model.enable_input_require_grads()
    else:
        batch, checkpointing = 1, True
        model.enable_input_require_grads()
    accum = max(1, math.ceil(cfg.rows_per_step / batch))
    if kind == "plain":
        accum = cfg.rows_per_step // batch
    if strong:
        parts = [
            f"Liger {'on' if liger else 'off'}",
            f"attention {attn}",
            rows_how,
            f"lora_dropout {dropout:g}",
            f"gradient checkpointing {'on' if checkpointing else 'off'}",
            f"batch {batch} x {accum} accumulation"
            + (" (searched in the Trainer)" if search else ""),
            "peft input cast off",
            f"expandable_segments {'on' if expandable else 'off'}",
            "bf16" if cuda else "fp32",
        ]
        description = "Trainer + peft, " + ", ".join(parts)
    else:
        padding = (
            "padded to the longest row of the batch"
            if kind == "plain"
            else f"padded to {cfg.seq_len}"
        )
        description = (
            f"Trainer + peft, lora_dropout {dropout:g}, SDPA, gradient checkpointing "
            f"{'on' if checkpointing else 'off'}, batch {batch} x {accum} accumulation, {padding}, "
            f"{'bf16' if cuda else 'fp32'}"
        )
    out_of_memory = False
    try:
        _run_trainer(
            Counting,
            model,
            dataset,
            cfg,
            batch,
            accum,
            checkpointing,
            warmup,
            steps,
            cuda,
            collator,
            Timer,
            liger,
            (log, f"{name}: {description}, {batch * accum} rows per step"),
        )
    except torch.cuda.OutOfMemoryError:
        if kind != "plain" or (batch == 1 and checkpointing):
            raise
        out_of_memory = True
    finally:
        if expandable:
            _expandable_segments(False)
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
    out = {
        "recipe": name,
        "description": description,
        "times": times,
        "tokens": step_tokens,
        "attn_sq": step_sq,
        "peak": peak,
        "batch": batch,
        "gradient_checkpointing": checkpointing,
        "lora_dropout": dropout,
        "rows_per_step": batch * accum,
        "median": statistics.median(times) if times else None,
    }
    if strong:
        out.update(
            {
                "liger": liger,
                "attention": attn,
                "expandable_segments": expandable,
                "batch_search": {
                    str(b): (round(v, 1) if v is not None else None) for b, v in search.items()
                },
            }
        )
    return out


_BELOW: dict[str, tuple[int, bool]] = {}


def _retry(cfg, steps, warmup, log, failed: tuple[int, bool]) -> dict:
    _BELOW["plain"] = failed
    try:
        return measure_reference(cfg, steps, warmup, log, kind="plain")
    finally:
        _BELOW.pop("plain", None)


def _run_trainer(
    trainer_cls,
    model,
    dataset,
    cfg,
    batch,
    accum,
    checkpointing,
    warmup,
    steps,
    cuda,
    collator,
    timer,
    liger,
    announce,
) -> None:
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accum,
            max_steps=warmup + steps,
            learning_rate=cfg.lr,
            bf16=cuda,
            gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            dataloader_num_workers=0,
            seed=cfg.seed,
            remove_unused_columns=False,
            disable_tqdm=True,
            use_cpu=not cuda,
            use_liger_kernel=liger,
        )
        trainer = trainer_cls(
            model=model,
            args=args,
            train_dataset=dataset,
            callbacks=[timer()],
            data_collator=collator,
        )
        if announce:
            announce[0](announce[1])
        try:
            trainer.train()
        finally:
            trainer.model = trainer.model_wrapped = trainer.optimizer = trainer.lr_scheduler = None
            del trainer


__all__ = [
    "RECIPES",
    "REFERENCE_DROPOUT",
    "fed_lengths",
    "measure_reference",
    "search_batch",
    "strongest_fit",
]
