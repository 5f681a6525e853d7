"""`fleetdeck bench --baseline --references unsloth`: Unsloth on the bench's own shapes and rows.

Unsloth (`FastLanguageModel` + trl's `SFTTrainer`, which it patches) is the peer operators name
first for fast LoRA. It patches transformers, peft and trl when it is imported, so it runs in a
process of its own: the bench writes the run's random-weight model to a local checkpoint folder
(with a byte-level tokenizer matching the bench's), then starts `python -m
fleetdeck.backend.train.unsloth_reference` on it with the hub offline, and reads back the timed
steps as JSON. Same shapes, corpus rows, rank, alpha, targets, dropout, seed and sequence length
as the other references; Unsloth's own settings: its 16-bit LoRA path (no 4-bit base), sample
packing (`SFTConfig(packing=True)`: documents flattened without padding, Unsloth's packed
attention), gradient checkpointing off, and the per-device batch searched by timing the trainer
itself (reference.search_batch, as reference-strong); the rows per step follow that batch.
If batch 1 does not fit, Unsloth's own offloaded checkpointing ("unsloth") is switched on.
Importing this module loads neither torch nor Unsloth.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: what the Unsloth process imports (the modules, not the distributions' names), in the order a
#: missing one is named; Unsloth 2026.10.9 and unsloth_zoo import each of these when they load
NEEDS = (
    "unsloth",
    "unsloth_zoo",
    "trl",
    "datasets",
    "bitsandbytes",
    "torchao",
    "cut_cross_entropy",
    "tyro",
    "msgspec",
    "structlog",
    "json5",
    "nest_asyncio",
    "pydantic",
    "dill",
    "multiprocess",
)
#: the recipe name the bench reports
NAME = "unsloth"
#: the environment the Unsloth process runs in: nothing is fetched, no usage statistics sent
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "UNSLOTH_DISABLE_STATISTICS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


#: where the Unsloth process finds its packages, when they are kept off the bench's own path (the
#: bench's process then never sees Unsloth's trl, torchao or pydantic): its PYTHONPATH, which must
#: also reach the fleetdeck package
PATH_VAR = "FLEETDECK_UNSLOTH_PYTHONPATH"


def missing() -> list[str]:
    """The modules of NEEDS the Unsloth process would not find (nothing is imported to find out):
    on PATH_VAR's folders and this interpreter's own when it is set, else on this process's path."""
    extra = [p for p in os.environ.get(PATH_VAR, "").split(os.pathsep) if p]
    out = []
    for name in NEEDS:
        try:
            if extra:
                base = [
                    p
                    for p in sys.path
                    if p
                    and (
                        "site-packages" in p
                        or "dist-packages" in p
                        or p.startswith(sys.base_prefix)
                    )
                ]
                found = importlib.machinery.PathFinder.find_spec(name, extra + base) is not None
            else:
                found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def refusal(lost: list[str]) -> str:
    """The sentence `fleetdeck bench` prints when the Unsloth reference cannot run here."""
    return (
        f"--references unsloth needs Unsloth importable by this Python ({sys.executable}); missing: "
        f"{', '.join(lost)}. Install unsloth==2026.10.9 with its requirements (unsloth_zoo, trl<=1.15, "
        "datasets<5, bitsandbytes, torchao, cut_cross_entropy, tyro, msgspec, structlog, json5, "
        "nest_asyncio, pydantic), or on a lent H200 carry the wheels of benchmarks/unsloth_wheels.sh"
    )


def write_checkpoint(cfg, folder: Path, log) -> Path:
    """The run's base model as a local checkpoint Unsloth can load: a `random:` shape is built with
    the run's seed (as the other recipes build it) and saved with a byte-level tokenizer whose
    ids are the bench's ByteTokenizer's; a local checkpoint folder is used as it is."""
    if not cfg.base_model.startswith("random:"):
        return Path(cfg.base_model)
    import torch

    from .models import build_model

    out = folder / cfg.base_model.split(":", 1)[1]
    if (out / "config.json").is_file():
        return out
    t0 = time.perf_counter()
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    model = build_model(cfg.base_model, torch.bfloat16, device, "sdpa", cfg.seed)
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(str(out), safe_serialization=True)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    byte_tokenizer().save_pretrained(str(out))
    log(
        f"{NAME}: wrote {cfg.base_model} (seed {cfg.seed}) as a checkpoint in {out} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return out


def byte_tokenizer():
    """A transformers tokenizer with the ByteTokenizer's ids (bytes 0-255, 256 end of text, 257
    padding): the trainer is fed token ids, so it only has to name those two. Written as the
    tokenizer.json a word-level `tokenizers` model saves, so nothing beyond transformers is needed."""
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<0x{i:02X}>": i for i in range(256)}
    vocab["<|endoftext|>"], vocab["<|pad|>"] = 256, 257
    special = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in (("<|endoftext|>", 256), ("<|pad|>", 257))
    ]
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<|endoftext|>"},
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        path.write_text(json.dumps(spec))
        return PreTrainedTokenizerFast(
            tokenizer_file=str(path),
            eos_token="<|endoftext|>",
            pad_token="<|pad|>",
            unk_token="<|endoftext|>",
            model_max_length=1 << 20,
        )


def measure_unsloth(cfg, steps: int, warmup: int, log, checkpointing: str = "off") -> dict:
    """Time Unsloth in its own process on the run's shapes and rows (see the module docstring);
    the result has the keys reference.measure_reference's has. Raises RuntimeError with the
    process's last line when it fails."""
    lost = missing()
    if lost:
        raise RuntimeError(refusal(lost))
    folder = (
        Path(os.environ.get("FLEETDECK_UNSLOTH_DIR") or tempfile.gettempdir()) / "fleetdeck-unsloth"
    )
    folder.mkdir(parents=True, exist_ok=True)
    ckpt = write_checkpoint(cfg, folder, log)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=folder))
    result = work / "result.json"
    env = {**os.environ, **OFFLINE_ENV}
    if os.environ.get(PATH_VAR):
        env["PYTHONPATH"] = os.environ[PATH_VAR]
    cmd = [
        sys.executable,
        "-m",
        "fleetdeck.backend.train.unsloth_reference",
        cfg.source,
        "--checkpoint",
        str(ckpt),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--checkpointing",
        checkpointing,
        "--out",
        str(result),
    ]
    log(f"{NAME}: its own process: {' '.join(cmd[1:])} (cwd {work})")
    t0 = time.perf_counter()
    # its lines pass through as they come (a run stopped from outside still leaves its batch
    # search in the log); the last ones are kept to say why it failed
    proc = subprocess.Popen(
        cmd,
        cwd=work,
        env=env,
        stdout=sys.stderr,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    tail: collections.deque[str] = collections.deque(maxlen=40)
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.strip():
            tail.append(line.strip())
    code = proc.wait()
    if code != 0 or not result.is_file():
        last = tail[-1][:300] if tail else "no output"
        raise RuntimeError(f"the Unsloth process exited {code}: {last}")
    out = json.loads(result.read_text())
    log(f"{NAME}: its process took {time.perf_counter() - t0:.1f} s")
    return out


# --- the Unsloth process ------------------------------------------------------------------------


def piece_lengths(inputs: dict) -> list[int]:
    """Each attended piece's real length in one packed micro-batch as the trainer feeds it:
    Unsloth's `packed_seq_lengths`, else position ids restarting at 0, else reference.fed_lengths."""
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
    from .reference import fed_lengths

    return fed_lengths(inputs)


def _pieces(cfg) -> list[list[int]]:
    """The bench's training rows as their document pieces (the rows every recipe is fed), in
    row order: packing fits them back into `seq_len`-token rows."""
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
    p = argparse.ArgumentParser(prog="python -m fleetdeck.backend.train.unsloth_reference")
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

    import torch
    from transformers import TrainerCallback

    from .reference import search_batch
    from .runconfig import load_run_config

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    cfg = load_run_config(args.run_toml)
    pieces = _pieces(cfg)
    dataset = Dataset.from_dict({"input_ids": pieces})
    mode = {"off": False, "unsloth": "unsloth", "true": True}[args.checkpointing]

    def load(gc_mode):
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
    times: list[float] = []
    step_tokens: list[int] = []
    step_sq: list[int] = []
    fed = {"tokens": 0, "sq": 0}

    class Counting(SFTTrainer):  # type: ignore[valid-type, misc]  # a base class loaded at run time
        def training_step(self, model, inputs, *a, **kw):
            lengths = piece_lengths(inputs)
            fed["tokens"] += sum(lengths)
            fed["sq"] += sum(n * n for n in lengths)
            return super().training_step(model, inputs, *a, **kw)

    class Timer(TrainerCallback):
        t0 = 0.0
        skip = args.warmup

        def on_step_begin(self, a, state, control, **kw):
            torch.cuda.synchronize()
            if state.global_step == Timer.skip:
                torch.cuda.reset_peak_memory_stats()
            Timer.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            torch.cuda.synchronize()
            if state.global_step > Timer.skip:
                times.append(time.perf_counter() - Timer.t0)
                step_tokens.append(fed["tokens"])
                step_sq.append(fed["sq"])
            fed["tokens"] = fed["sq"] = 0

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
            trainer = Counting(
                model=model,
                args=conf,
                train_dataset=dataset,
                processing_class=tokenizer,
                callbacks=[Timer()],
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
        times.clear()
        step_tokens.clear()
        step_sq.clear()
        Timer.skip = 1
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
            import gc

            gc.collect()
            torch.cuda.empty_cache()
        return sum(step_tokens) / sum(times) if times else None

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
    times.clear()
    step_tokens.clear()
    step_sq.clear()
    Timer.skip = args.warmup
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
        "times": times,
        "tokens": step_tokens,
        "attn_sq": step_sq,
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


__all__ = [
    "NAME",
    "NEEDS",
    "OFFLINE_ENV",
    "byte_tokenizer",
    "child_main",
    "measure_unsloth",
    "missing",
    "piece_lengths",
    "refusal",
    "write_checkpoint",
]


if __name__ == "__main__":
    sys.exit(child_main())
