"""Base models: `random:<arch>` with real Qwen3 shapes and random weights, or a local checkpoint.

Nothing is ever fetched from a hub: local checkpoints load with `local_files_only`, random
models are built from a `Qwen3Config`. Step time depends on shapes, dtype and kernels, not on
weight values, so random models serve benchmarks and tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .corpus import ByteTokenizer, Tokenizer

_QWEN3 = dict(vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
              tie_word_embeddings=True, hidden_act="silu", attention_bias=False, head_dim=128)
ARCHS: dict[str, dict] = {
    "tiny": dict(_QWEN3, vocab_size=258, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=8192),
    "qwen3-0.6b": dict(_QWEN3, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8),
    "qwen3-1.7b": dict(_QWEN3, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8),
    "qwen3-4b": dict(_QWEN3, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8),
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


def qwen3_config(arch: str):
    """A transformers Qwen3Config for a built-in architecture name."""
    from transformers import Qwen3Config

    if arch not in ARCHS:
        raise ModelError(f"unknown random architecture {arch!r} (built in: {', '.join(ARCHS)})")
    kw = dict(ARCHS[arch])
    try:
        cfg = Qwen3Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    except TypeError:  # transformers 4.x names it rope_theta
        cfg = Qwen3Config(**kw, rope_theta=1_000_000.0)
    cfg.use_cache = False
    return cfg


def _text_config(cfg):
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def shapes_of(model) -> Shapes:
    """Layer count, heads, head size, hidden size and vocabulary of a causal LM."""
    c = _text_config(model.config)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return Shapes(c.num_hidden_layers, c.num_attention_heads, head_dim, c.hidden_size, c.vocab_size)


def build_model(base_model: str, dtype: torch.dtype, device: torch.device, attn: str, seed: int):
    """The base model on `device` in `dtype`, eval-free and cache-free, its weights frozen."""
    torch.manual_seed(seed)
    if base_model.startswith("random:"):
        from transformers import Qwen3ForCausalLM

        cfg = qwen3_config(base_model.split(":", 1)[1])
        cfg._attn_implementation = attn
        with torch.device(device):
            try:
                model = Qwen3ForCausalLM._from_config(cfg, dtype=dtype)
            except TypeError:
                model = Qwen3ForCausalLM._from_config(cfg, torch_dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM

        path = Path(base_model)
        if not (path / "config.json").is_file():
            raise ModelError(f"base_model {path} is not a local checkpoint folder (no config.json)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True,
                                                         attn_implementation="sdpa")
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"base_model {path} cannot be loaded: {first}") from None
        model.to(device)
    set_attention(model, attn)
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def set_attention(model, attn: str) -> None:
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

    def encode(self, text: str) -> list[int]:
        return self._tok(text, add_special_tokens=False)["input_ids"]


def load_tokenizer(base_model: str, tokenizer: str | None) -> Tokenizer:
    """The configured tokenizer, else the checkpoint's own, else (random models) the byte one."""
    if tokenizer:
        if not Path(tokenizer).is_dir():
            raise ModelError(f"tokenizer {tokenizer} is not a local folder")
        return _HFTokenizer(tokenizer)
    if base_model.startswith("random:"):
        return ByteTokenizer()
    if not (Path(base_model) / "config.json").is_file():
        raise ModelError(f"base_model {base_model} is not a local checkpoint folder (no config.json)")
    return _HFTokenizer(base_model)


__all__ = ["ARCHS", "ModelError", "Shapes", "build_model", "load_tokenizer", "qwen3_config", "shapes_of",
           "set_attention"]
