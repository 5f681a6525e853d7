"""RUN.toml: strict parsing into a frozen `RunConfig` (stdlib only).

Unknown keys and wrong types raise `fleetdeck.backend.fleet.config.ConfigError` naming the file and
the key, exactly like the fleet file. Relative paths are taken relative to the RUN.toml's folder.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from fleetdeck.backend.fleet.config import (
    Bounds,
    ConfigError,
    control_problem,
    number_problem,
    read_config_text,
    toml_shown,
)

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AUTO = "auto"


@dataclass(frozen=True)
class RunConfig:
    """One training run as RUN.toml describes it; every default already applied."""

    #: the run's name (shown by `fleetdeck runs`)
    name: str
    #: a local checkpoint folder, or `random:<arch>` (tiny, qwen3-0.6b, qwen3-1.7b, qwen3-4b)
    base_model: str
    #: JSON lines with a `text` field (.jsonl), or a plain text file, or a folder of either
    corpus: str
    #: the run folder; created if absent
    output: str
    #: a local tokenizer folder; default: the checkpoint's own, or the byte tokenizer for random models
    tokenizer: str | None = None
    seed: int = 4919
    #: tokens per row
    seq_len: int = 4096
    #: rows per micro-batch in the operator's recipe; rows per optimizer step = batch_size * grad_accum * gpus
    batch_size: int = 1
    grad_accum: int = 8
    #: used when max_steps is not given (or <= 0)
    epochs: float = 1.0
    max_steps: int = 0
    lr: float = 1e-4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_dropout: float = 0.0
    #: module names (last path component) to adapt; each must match at least one Linear
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    #: share of documents held out for eval (at least one document when > 0), at most half;
    #: 0: no eval split, every document trains
    eval_fraction: float = 0.05
    eval_steps: int = 25
    save_steps: int = 25
    logging_steps: int = 1
    #: true, false, or "auto" (off when memory allows, else on for as few layers as needed)
    gradient_checkpointing: bool | str = AUTO
    #: pack documents into full rows (attention never crosses documents either way)
    packing: bool = True
    #: data-parallel processes on this host (through torchrun)
    gpus: int = 1
    #: rows per forward pass: "auto" (from free GPU memory) or a number dividing batch_size * grad_accum
    micro_batch: int | str = AUTO
    #: "auto" (varlen flash on CUDA, per-document SDPA elsewhere), "varlen", "fa4" (FlashAttention-4's
    #: varlen kernels from the flash-attn-4 package) or "cudnn" (cuDNN's varlen kernel), each
    #: falling back to flash where it is missing or fails its trial, "sdpa"
    attention: str = AUTO
    #: torch.compile each decoder layer: true, false or "auto" (on for CUDA)
    compile: bool | str = AUTO
    #: q/k/v and gate/up as one matmul each (base and LoRA): true, false or "auto" (on for CUDA)
    fused_projections: bool | str = AUTO
    #: liger-kernel's RMSNorm / SwiGLU / RoPE kernels: true, or false / "auto" (off: no gain next to torch.compile)
    liger: bool | str = AUTO
    #: in fused q/k/v and gate/up, the LoRA product inside the base matmul: true, false, or "auto" (on)
    lora_in_base: bool | str = AUTO
    #: the frozen base products in float8 with row-wise scales (backend/train/fp8.py): true or false
    base_fp8: bool = False
    #: the output head's cross-entropy chunks: "auto" (the Triton kernel on CUDA where it passes its
    #: check, else compiled), "compiled" (torch.compile'd chunk function) or "eager"
    cross_entropy: str = AUTO
    #: "auto" (bfloat16 on CUDA, float32 on CPU), "bfloat16", "float32"
    dtype: str = AUTO
    #: where this config came from (not a RUN.toml key)
    source: str = field(default="", compare=False)

    @property
    def rows_per_step(self) -> int:
        """Rows one optimizer step consumes on one process."""
        return self.batch_size * self.grad_accum


_INT, _FLOAT, _STR, _BOOL = (int,), (int, float), (str,), (bool,)
# key -> (accepted types, words for the error, extra check)
_SPEC: dict[str, tuple[tuple[type, ...], str]] = {
    "name": (_STR, "a string"),
    "base_model": (_STR, "a string"),
    "corpus": (_STR, "a string"),
    "output": (_STR, "a string"),
    "tokenizer": (_STR, "a string"),
    "seed": (_INT, "an integer"),
    "seq_len": (_INT, "an integer"),
    "batch_size": (_INT, "an integer"),
    "grad_accum": (_INT, "an integer"),
    "epochs": (_FLOAT, "a number"),
    "max_steps": (_INT, "an integer"),
    "lr": (_FLOAT, "a number"),
    "warmup_steps": (_INT, "an integer"),
    "weight_decay": (_FLOAT, "a number"),
    "max_grad_norm": (_FLOAT, "a number"),
    "lora_rank": (_INT, "an integer"),
    "lora_alpha": (_FLOAT, "a number"),
    "lora_dropout": (_FLOAT, "a number"),
    "target_modules": ((list,), "a list of module names"),
    "eval_fraction": (_FLOAT, "a number"),
    "eval_steps": (_INT, "an integer"),
    "save_steps": (_INT, "an integer"),
    "logging_steps": (_INT, "an integer"),
    "gradient_checkpointing": ((bool, str), 'true, false or "auto"'),
    "packing": (_BOOL, "true or false"),
    "gpus": (_INT, "an integer"),
    "micro_batch": ((int, str), 'an integer or "auto"'),
    "attention": (_STR, '"auto", "varlen", "fa4", "cudnn" or "sdpa"'),
    "compile": ((bool, str), 'true, false or "auto"'),
    "liger": ((bool, str), 'true, false or "auto"'),
    "fused_projections": ((bool, str), 'true, false or "auto"'),
    "lora_in_base": ((bool, str), 'true, false or "auto"'),
    "base_fp8": (_BOOL, "true or false"),
    "cross_entropy": (_STR, '"auto", "compiled" or "eager"'),
    "dtype": (_STR, '"auto", "bfloat16" or "float32"'),
}
_REQUIRED = ("name", "base_model", "corpus", "output")
_STEPS = 10**9  # more optimizer steps than any run takes
_ROWS = 65536
#: every number key's documented range (docs/launch.md): `fleetdeck train`, `bench` and `launch`
#: all check RUN.toml here, before anything starts
RUN_NUMBERS: dict[str, Bounds] = {
    "seed": Bounds(
        0, 2**32 - 1, integer=True
    ),  # numpy's seed range (the reference recipe seeds it)
    "seq_len": Bounds(0, 2**20, integer=True, above=True),
    "batch_size": Bounds(0, _ROWS, integer=True, above=True),
    "grad_accum": Bounds(0, _ROWS, integer=True, above=True),
    "epochs": Bounds(0, 1e6),
    "max_steps": Bounds(0, _STEPS, integer=True),  # 0: from epochs
    "lr": Bounds(0, 1, above=True, below=True),
    "warmup_steps": Bounds(0, _STEPS, integer=True),
    "weight_decay": Bounds(0, 1),
    "max_grad_norm": Bounds(0, 1e6),
    "lora_rank": Bounds(0, _ROWS, integer=True, above=True),
    "lora_alpha": Bounds(0, 1e6, above=True),
    "lora_dropout": Bounds(0, 1, below=True),
    "eval_fraction": Bounds(
        0, 0.5
    ),  # 0: no eval; past half, the eval split outweighs the training one
    "eval_steps": Bounds(0, _STEPS, integer=True, above=True),
    "save_steps": Bounds(0, _STEPS, integer=True, above=True),
    "logging_steps": Bounds(0, _STEPS, integer=True, above=True),
    "gpus": Bounds(0, 1024, integer=True, above=True),
    "micro_batch": Bounds(0, _ROWS, integer=True, above=True),
}
_CHOICES = {
    "attention": ("auto", "varlen", "fa4", "cudnn", "sdpa"),
    "dtype": ("auto", "bfloat16", "float32"),
    "gradient_checkpointing": ("auto",),
    "compile": ("auto",),
    "liger": ("auto",),
    "fused_projections": ("auto",),
    "micro_batch": ("auto",),
    "lora_in_base": ("auto",),
    "cross_entropy": ("auto", "compiled", "eager"),
}
_PATHS = ("corpus", "output", "tokenizer")


def setting_value(source: str, key: str, value: object) -> object:
    if key not in _SPEC:
        known = ", ".join(sorted(_SPEC))
        raise ConfigError(f"{source}: unknown key {key!r} (RUN.toml keys: {known})")
    types, wanted = _SPEC[key]
    bad = (isinstance(value, bool) and bool not in types) or not isinstance(value, types)
    if bad:
        raise ConfigError(f"{source}: key {key!r} must be {wanted}, not {toml_shown(value)}")
    if isinstance(value, str) and (problem := control_problem(key, value)):
        raise ConfigError(f"{source}: {problem}")
    if isinstance(value, str) and key in _CHOICES and value not in _CHOICES[key]:
        raise ConfigError(f"{source}: key {key!r} must be {wanted}, not {value!r}")
    if key in RUN_NUMBERS and not isinstance(value, str):  # micro_batch may also be "auto"
        problem = number_problem(key, value, RUN_NUMBERS[key])
        if problem:
            raise ConfigError(f"{source}: {problem}")
    if key == "target_modules":
        if not value or not all(isinstance(v, str) and v for v in value):  # type: ignore[attr-defined]
            raise ConfigError(
                f"{source}: key 'target_modules' must be a non-empty list of module names"
            )
        if "all-linear" in value:  # type: ignore[operator]
            raise ConfigError(
                f"{source}: key 'target_modules': name the modules to adapt "
                '("all-linear" would also adapt vision or audio towers)'
            )
        return tuple(value)  # type: ignore[arg-type]
    if key in ("name", "base_model", "corpus", "output") and not value:
        raise ConfigError(f"{source}: key {key!r} must not be empty")
    if isinstance(value, int) and not isinstance(value, bool) and float in types:
        return float(value)
    return value


def parse_run_config(text: str, source: str, base_dir: Path | None = None) -> RunConfig:
    """Parse RUN.toml text strictly; ConfigError names the file and the key."""
    try:
        doc = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer too long for Python to read
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    return run_config_from_doc(doc, source, base_dir)


def run_config_from_doc(
    doc: dict[str, object], source: str, base_dir: Path | None = None
) -> RunConfig:
    """RUN.toml's parsed table checked strictly; relative paths resolved against `base_dir`."""
    values = {k: setting_value(source, k, v) for k, v in doc.items()}
    for key in _REQUIRED:
        if key not in values:
            raise ConfigError(f"{source}: missing key {key!r}")
    base = base_dir if base_dir is not None else Path.cwd()
    for key in _PATHS:
        if key in values:
            values[key] = _resolve(str(values[key]), base)
    if not str(values["base_model"]).startswith("random:"):
        values["base_model"] = _resolve(str(values["base_model"]), base)
    return RunConfig(source=source, **values)  # type: ignore[arg-type]


def _resolve(path: str, base: Path) -> str:
    p = Path(os.path.expanduser(path))
    return str(p if p.is_absolute() else (base / p))


def read_run_doc(path: str | os.PathLike[str]) -> dict[str, object]:
    """RUN.toml read and parsed as TOML (not yet checked); ConfigError when missing or invalid."""
    p = Path(path)
    try:
        return tomllib.loads(read_config_text(p, "RUN.toml"))
    except ValueError as e:  # TOMLDecodeError, or an integer too long for Python to read
        raise ConfigError(f"{p}: not valid TOML: {e}") from None


def load_run_config(path: str | os.PathLike[str]) -> RunConfig:
    """Read and parse a RUN.toml file; ConfigError when it is missing or invalid."""
    p = Path(path)
    return run_config_from_doc(read_run_doc(p), str(p), p.resolve().parent)


def config_to_dict(cfg: RunConfig) -> dict[str, object]:
    """The config as plain JSON-able values (for run.json)."""
    out: dict[str, object] = {}
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def with_overrides(cfg: RunConfig, **changes: object) -> RunConfig:
    """A copy of `cfg` with some fields changed (bench levers)."""
    return replace(cfg, **changes)  # type: ignore[arg-type]


__all__ = [
    "RunConfig",
    "parse_run_config",
    "load_run_config",
    "config_to_dict",
    "with_overrides",
    "setting_value",
    "DEFAULT_TARGETS",
]
