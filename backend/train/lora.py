"""LoRA on explicitly named modules: match, validate, report, apply (through peft).

A target names the last component of a Linear's path (`q_proj`). Every target must match at
least one Linear of the language model; modules inside a vision or audio tower or a
multi-token-prediction (MTP) head are never adapted when training on text (a checkpoint with a
vision tower can hold 153 Linears that a loose target list would otherwise train), and a target
that matches only such modules is refused. The plan counts what each target adapts per layer
type (a hybrid's `linear_attention` and `full_attention` layers differ in their projections).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from torch import nn

TOWER = re.compile(
    r"^(visual|vision.*|.*_vision|.*vision_(tower|model|encoder)|image_.*|img_.*|audio.*|"
    r".*_audio|speech.*|whisper.*|.*_projector|mm_proj.*|embed_vision|embed_audio)$"
)

MTP = re.compile(r"^(mtp|mtp_.*|.*_mtp|multi_token_predict.*|nextn.*)$")
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


class TargetError(Exception):
    """The target list cannot be applied (one sentence naming the target and why)."""


@dataclass
class TargetPlan:
    """Which modules LoRA adapts, per target, and which tower modules it leaves alone."""

    modules: list[str]
    per_target: dict[str, int]
    skipped_tower: list[str] = field(default_factory=list)
    #: layer type -> target -> Linear modules adapted in layers of that type
    per_layer_type: dict[str, dict[str, int]] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for the log: the count adapted, per target, and what was skipped."""
        parts = ", ".join(f"{t} x{n}" for t, n in self.per_target.items())
        line = f"LoRA adapts {len(self.modules)} modules ({parts})"
        if len(self.per_layer_type) > 1:
            line += "; per layer type: " + "; ".join(
                f"{kind}: " + ", ".join(f"{t} x{n}" for t, n in counts.items())
                for kind, counts in self.per_layer_type.items()
            )
        if self.skipped_tower:
            line += f"; left {len(self.skipped_tower)} vision/audio tower or MTP head modules alone"
        return line


def in_tower(name: str) -> bool:
    """Whether a module path lies inside a vision or audio tower or an MTP head."""
    return any(TOWER.match(part.lower()) or MTP.match(part.lower()) for part in name.split("."))


def _layer_type(name: str, types: list[str]) -> str:
    m = LAYER.search(name)
    if m is None:
        return "outside decoder layers"
    i = int(m.group(1))
    return types[i] if i < len(types) else "decoder layer"


def plan_targets(model: nn.Module, targets: tuple[str, ...] | list[str]) -> TargetPlan:
    """Match `targets` against the model's Linear modules; TargetError when one matches nothing."""
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n]
    per_target: dict[str, int] = {}
    chosen: list[str] = []
    skipped: list[str] = []
    for t in targets:
        hits = [n for n in linears if n.split(".")[-1] == t or n == t]
        text = [n for n in hits if not in_tower(n)]
        tower = [n for n in hits if in_tower(n)]
        skipped.extend(tower)
        if not hits:
            names = sorted({n.split(".")[-1] for n in linears if not in_tower(n)})
            raise TargetError(
                f"target module {t!r} matches no Linear module of the model "
                f"(its Linear names: {', '.join(names[:12])})"
            )
        if not text:
            raise TargetError(
                f"target module {t!r} matches only vision/audio tower or MTP head modules "
                f"({len(tower)}, e.g. {tower[0]}); refusing to adapt a tower or an MTP head "
                "when training on text"
            )
        per_target[t] = len(text)
        chosen.extend(text)
    types = _layer_types(model)
    per_type: dict[str, dict[str, int]] = {}
    for t in targets:
        for n in sorted(set(chosen)):
            if n.split(".")[-1] == t or n == t:
                kind = _layer_type(n, types)
                per_type.setdefault(kind, {}).setdefault(t, 0)
                per_type[kind][t] += 1
    return TargetPlan(sorted(set(chosen)), per_target, sorted(set(skipped)), per_type)


def _layer_types(model: nn.Module) -> list[str]:
    config = getattr(model, "config", None)
    if config is None:
        return []
    from .models import layer_types_of

    try:
        return layer_types_of(config)
    except Exception:  # noqa: BLE001 - a config without layer facts: count everything as one type
        return []


def apply_lora(
    model: nn.Module, plan: TargetPlan, rank: int, alpha: float, dropout: float
) -> nn.Module:
    """Wrap `model` with peft LoRA on exactly `plan.modules`; adapters in float32."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=plan.modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, cfg)
    for _, m in peft_model.named_modules():
        if hasattr(m, "cast_input_dtype_enabled"):
            # the matmuls run under autocast: casting activations to the adapters' float32 first
            # would only copy them twice
            m.cast_input_dtype_enabled = False
    for p in peft_model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    return peft_model


def lora_parameter_count(model: nn.Module) -> int:
    """Trainable parameters (the adapters)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def matmul_parameter_count(model: nn.Module) -> int:
    """Frozen weights that take part in a matmul per token: every Linear, the output head included."""
    total = 0
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and "lora_" not in name:
            total += m.weight.numel()
    return total


__all__ = [
    "TargetError",
    "TargetPlan",
    "apply_lora",
    "in_tower",
    "lora_parameter_count",
    "matmul_parameter_count",
    "plan_targets",
]
