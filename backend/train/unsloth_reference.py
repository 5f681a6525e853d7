"""`fleetdeck bench --baseline --references unsloth`: Unsloth on the bench's own shapes and rows.

Unsloth (`FastLanguageModel` + trl's `SFTTrainer`, which it patches) is the peer operators name
first for fast LoRA. It patches transformers, peft and trl when it is imported, so it runs in a
process of its own: the bench writes the run's random-weight model to a local checkpoint folder
(with a byte-level tokenizer matching the bench's), then starts `python -m
fleetdeck.backend.train.unsloth_process` on it with the hub offline, and reads back the timed
steps as JSON. Same shapes, corpus rows, rank, alpha, targets, dropout, seed and sequence length
as the other references; Unsloth's own settings: its 16-bit LoRA path (no 4-bit base), sample
packing (`SFTConfig(packing=True)`: documents flattened without padding, Unsloth's packed
attention), gradient checkpointing off, and the per-device batch searched by timing the trainer
itself (reference_fit.search_batch, as reference-strong); the rows per step follow that batch.
If batch 1 does not fit, Unsloth's own offloaded checkpointing ("unsloth") is switched on.
Importing this module loads neither torch nor Unsloth.
"""

from __future__ import annotations

import collections
import importlib
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from .runconfig import RunConfig

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


def write_checkpoint(cfg: RunConfig, folder: Path, log: Callable[..., object]) -> Path:
    """The run's base model as a local checkpoint Unsloth can load: a `random:` shape is built with
    the run's seed (as the other recipes build it) and saved with a byte-level tokenizer whose
    ids are the bench's ByteTokenizer's; a local checkpoint folder is used as it is."""
    if not cfg.base_model.startswith("random:"):
        return Path(cfg.base_model)
    # deferred: torch and the model zoo (this module answers --help without them)
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


def byte_tokenizer() -> Any:
    """A transformers tokenizer with the ByteTokenizer's ids (bytes 0-255, 256 end of text, 257
    padding): the trainer is fed token ids, so it only has to name those two. Written as the
    tokenizer.json a word-level `tokenizers` model saves, so nothing beyond transformers is needed."""
    # deferred: transformers (seconds; this module answers --help without it)
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


def measure_unsloth(
    cfg: RunConfig,
    steps: int,
    warmup: int,
    log: Callable[..., object],
    checkpointing: str = "off",
) -> dict:
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
        "fleetdeck.backend.train.unsloth_process",
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


__all__ = [
    "NAME",
    "NEEDS",
    "OFFLINE_ENV",
    "PATH_VAR",
    "byte_tokenizer",
    "measure_unsloth",
    "missing",
    "refusal",
    "write_checkpoint",
]
