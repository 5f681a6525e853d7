"""Base models: `random:<arch>` with real Qwen3 shapes and random weights, or a local checkpoint.

Nothing is ever fetched from a hub: local checkpoints load with `local_files_only`, random
models are built from a `Qwen3Config` (or, for `tiny-hybrid`, a Qwen3.5 text config with gated
delta-net linear-attention layers beside attention layers). Step time depends on shapes, dtype
and kernels, not on weight values, so random models serve benchmarks and tests.

`layer_kinds` reads from a model's config which of its layers are recurrent (linear attention,
SSM, convolution state): those carry state along the sequence and ignore the attention mask, so
such a model must never see two documents in one sequence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fleetdeck.backend.host.lib.architectures import ARCHS, HYBRID_ARCHS

from .corpus import ByteTokenizer, Tokenizer

#: layer types (config.layer_types and the like) that attend through softmax attention
ATTENTION_LAYER_TYPES = {
    "full_attention",
    "attention",
    "sliding_attention",
    "chunked_attention",
    "global_attention",
    "local_attention",
    "attn",
    "*",
}
#: model types whose layers (some or all) carry recurrent state along the sequence
RECURRENT_MODEL_TYPES = {
    "mamba",
    "mamba2",
    "falcon_mamba",
    "jamba",
    "bamba",
    "zamba",
    "zamba2",
    "falcon_h1",
    "nemotron_h",
    "granitemoehybrid",
    "lfm2",
    "lfm2_moe",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_text",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "kimi_linear",
    "minimax",
    "recurrent_gemma",
    "rwkv",
    "xlstm",
    "plamo2",
    "hymba",
}


class ModelError(Exception):
    """The base model or tokenizer cannot be used (one sentence saying why)."""


@dataclass(frozen=True)
class Shapes:
    """What the MFU formula needs from a model."""

    layers: int
    heads: int
    head_dim: int
    hidden: int
    vocab: int


def _hybrid_config(arch: str) -> Any:
    """A Qwen3.5 text config (gated delta-net + attention layers), or Qwen3-Next's where this
    transformers has no Qwen3.5."""
    kw: dict = dict(HYBRID_ARCHS[arch])
    try:
        from transformers import Qwen3_5TextConfig as Config
    except ImportError:
        try:
            from transformers import Qwen3NextConfig as Config
        except ImportError:
            raise ModelError(
                f"random:{arch} needs a transformers with Qwen3.5 or Qwen3-Next"
            ) from None
        kw.update(
            num_experts=0,
            decoder_sparse_step=1,
            mlp_only_layers=list(range(kw["num_hidden_layers"])),
        )
    cfg = Config(**kw)
    cfg.use_cache = False
    return cfg


def _hybrid_class(cfg: Any) -> Any:
    if cfg.model_type.startswith("qwen3_5"):
        from transformers import Qwen3_5ForCausalLM

        return Qwen3_5ForCausalLM
    from transformers import Qwen3NextForCausalLM

    return Qwen3NextForCausalLM


def qwen3_config(arch: str) -> Any:
    """A transformers Qwen3Config for a built-in architecture name."""
    from transformers import Qwen3Config

    if arch in HYBRID_ARCHS:
        return _hybrid_config(arch)
    if arch not in ARCHS:
        names = ", ".join([*ARCHS, *HYBRID_ARCHS])
        raise ModelError(f"unknown random architecture {arch!r} (built in: {names})")
    kw = dict(ARCHS[arch])
    try:
        cfg = Qwen3Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    except TypeError:  # transformers 4.x names it rope_theta
        cfg = Qwen3Config(**kw, rope_theta=1_000_000.0)
    cfg.use_cache = False
    return cfg


def _text_config(cfg: Any) -> Any:
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def shapes_of(model: torch.nn.Module) -> Shapes:
    """Layer count, heads, head size, hidden size and vocabulary of a causal LM."""
    c = _text_config(model.config)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return Shapes(c.num_hidden_layers, c.num_attention_heads, head_dim, c.hidden_size, c.vocab_size)


def layer_kinds(config: Any) -> list[str]:
    """Each decoder layer's kind, "attention" or "recurrent" (linear attention, SSM, short
    convolution: anything that carries state along the sequence), from the model's config:
    `layer_types`, `layers_block_type`, `hybrid_override_pattern`, else the model type."""
    c = _text_config(config)
    n = int(getattr(c, "num_hidden_layers", 0) or 0)
    for attr in ("layer_types", "layers_block_type", "block_types"):
        types = getattr(c, attr, None)
        if isinstance(types, (list, tuple)) and types and all(isinstance(t, str) for t in types):
            return [
                "attention" if t.lower() in ATTENTION_LAYER_TYPES else "recurrent" for t in types
            ]
    pattern = getattr(c, "hybrid_override_pattern", None)
    if isinstance(pattern, str) and pattern:  # nemotron_h: M = mamba, * = attention, - = MLP
        return ["attention" if ch == "*" else "recurrent" if ch == "M" else "mlp" for ch in pattern]
    model_type = str(getattr(c, "model_type", "") or getattr(config, "model_type", ""))
    if model_type in RECURRENT_MODEL_TYPES:
        return ["recurrent"] * n
    return ["attention"] * n


def layer_types_of(config: Any) -> list[str]:
    """The config's own name for each decoder layer's type ("full_attention", "linear_attention"...),
    or "attention" / "recurrent" where the config names none."""
    c = _text_config(config)
    types = getattr(c, "layer_types", None)
    if isinstance(types, (list, tuple)) and types and all(isinstance(t, str) for t in types):
        return list(types)
    return layer_kinds(config)


def packing_refusal(model: torch.nn.Module, seq_len: int) -> tuple[str, bool] | None:
    """Why documents cannot share a row for this model, or None: attention features the packed
    varlen kernels do not apply (sliding-window attention with a window below seq_len, attention
    logit soft-capping, learned attention sinks). Returns (reason, whether transformers' eager
    attention is needed to honour them in the padded rows: SDPA ignores soft-capping and sinks)."""
    c = _text_config(model.config)
    reasons, eager = [], False
    window = getattr(c, "sliding_window", None)
    types = getattr(c, "layer_types", None) or []
    sliding = sum(1 for t in types if isinstance(t, str) and "sliding" in t)
    if (
        isinstance(window, int)
        and 0 < window < seq_len
        and getattr(c, "use_sliding_window", True) is not False
        and (sliding or not types)
    ):
        where = f" in {sliding} of {len(types)} layers" if types else ""
        reasons.append(f"sliding-window attention (window {window} < seq_len {seq_len}{where})")
    cap = getattr(c, "attn_logit_softcapping", None)
    if cap:
        reasons.append(f"attention logit soft-capping ({cap:g})")
        eager = True
    sinks = sum(1 for name, _ in model.named_parameters() if name.rsplit(".", 1)[-1] == "sinks")
    if sinks:
        reasons.append(f"learned attention sinks ({sinks} layers)")
        eager = True
    if not reasons:
        return None
    return (
        " and ".join(reasons)
        + " not applied by the packed varlen attention; one document per row, "
        + ("transformers' eager attention" if eager else "SDPA")
        + " with the padding mask"
    ), eager


def final_softcap_refusal(model: torch.nn.Module) -> str | None:
    """Why the trainer's chunked cross-entropy cannot train this model, or None."""
    cap = getattr(_text_config(model.config), "final_logit_softcapping", None)
    if cap:
        return (
            f"final_logit_softcapping ({cap:g}) is not applied by the trainer's chunked "
            "cross-entropy, so its loss would not be the model's"
        )
    return None


def is_recurrent(config: Any) -> bool:
    """Whether any layer carries state along the sequence (packing documents would leak it)."""
    return "recurrent" in layer_kinds(config)


def build_model(
    base_model: str, dtype: torch.dtype, device: torch.device, attn: str, seed: int
) -> torch.nn.Module:
    """The base model on `device` in `dtype`, eval-free and cache-free, its weights frozen."""
    torch.manual_seed(seed)
    if base_model.startswith("random:"):
        from transformers import Qwen3ForCausalLM

        cfg = qwen3_config(base_model.split(":", 1)[1])
        cls = Qwen3ForCausalLM if cfg.model_type == "qwen3" else _hybrid_class(cfg)
        cfg._attn_implementation = attn
        with torch.device(device):
            try:
                model = cls._from_config(cfg, dtype=dtype)
            except TypeError:
                model = cls._from_config(cfg, torch_dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM

        path = Path(base_model)
        if not (path / "config.json").is_file():
            raise ModelError(f"base_model {path} is not a local checkpoint folder (no config.json)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(path), dtype=dtype, local_files_only=True, attn_implementation="sdpa"
            )
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"base_model {path} cannot be loaded: {first}") from None
        model.to(device)
    set_attention(model, attn)
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def set_attention(model: torch.nn.Module, attn: str) -> None:
    """Point every (sub)config of `model` at the attention implementation `attn`."""
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            try:
                cfg._attn_implementation = attn
            except (AttributeError, ValueError):
                cfg._attn_implementation_internal = attn


class _HFTokenizer:
    """A local transformers tokenizer behind the trainer's small Tokenizer protocol."""

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        try:
            self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"tokenizer {path} cannot be loaded: {first}") from None
        eos = self._tok.eos_token_id
        if eos is None:
            raise ModelError(f"tokenizer {path} has no end-of-text token")
        self.eos_id = int(eos)
        self.pad_id = int(self._tok.pad_token_id if self._tok.pad_token_id is not None else eos)
        self.vocab_size = len(self._tok)
        #: the beginning-of-text token when the tokenizer's own template starts every text with it
        #: (Llama, Gemma...): each document then starts with it, as the model saw text in training
        bos = self._tok.bos_token_id
        probe = self._tok("a")["input_ids"]
        self.bos_id = int(bos) if bos is not None and probe and probe[0] == bos else None

    def encode(self, text: str) -> list[int]:
        return self._tok(text, add_special_tokens=False)["input_ids"]

    def token_text(self, token: int) -> str:
        """What one token stands for, decoded alone."""
        return self._tok.decode([token])


def load_tokenizer(base_model: str, tokenizer: str | None) -> Tokenizer:
    """The configured tokenizer, else the checkpoint's own, else (random models) the byte one."""
    if tokenizer:
        if not Path(tokenizer).is_dir():
            raise ModelError(f"tokenizer {tokenizer} is not a local folder")
        return _HFTokenizer(tokenizer)
    if base_model.startswith("random:"):
        return ByteTokenizer()
    if not (Path(base_model) / "config.json").is_file():
        raise ModelError(
            f"base_model {base_model} is not a local checkpoint folder (no config.json)"
        )
    return _HFTokenizer(base_model)


__all__ = [
    "ARCHS",
    "HYBRID_ARCHS",
    "ModelError",
    "final_softcap_refusal",
    "is_recurrent",
    "packing_refusal",
    "layer_kinds",
    "layer_types_of",
    "Shapes",
    "build_model",
    "load_tokenizer",
    "qwen3_config",
    "shapes_of",
    "set_attention",
]
