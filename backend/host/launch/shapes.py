"""The model's shapes for the launch estimate, read before the model is built (stdlib only,
Python 3.8 or newer; bundled with the launch helper through `estimate`): parameter and LoRA
counts from the built-in architecture table or a checkpoint's safetensors headers, and the bytes
`base_fp8`'s float8 copies take."""

from __future__ import annotations

import json
import os
import struct

from fleetdeck.backend.host.lib import architectures

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, Iterable, List, Tuple

MIB = 1 << 20
#: the trainer's built-in architectures (one table: host/lib/architectures.py), in short names
ARCHS = {name: architectures.shape(name) for name in architectures.ARCHS}


def arch_modules(a: Dict[str, Any]) -> Dict[str, Tuple[int, int]]:
    """{projection: (in, out)} of one decoder layer of a built-in architecture `a`."""
    h, i, hd = a["hidden"], a["inter"], a["head_dim"]
    return {
        "q_proj": (h, a["heads"] * hd),
        "k_proj": (h, a["kv"] * hd),
        "v_proj": (h, a["kv"] * hd),
        "o_proj": (a["heads"] * hd, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def arch_shapes(arch: str, targets: Iterable[str], rank: int) -> Tuple[int, int, Dict[str, Any]]:
    """(P, L, dims) for a built-in architecture."""
    a = ARCHS[arch]
    h, hd = a["hidden"], a["head_dim"]
    mods = arch_modules(a)
    per_layer = sum(x * y for x, y in mods.values()) + 2 * h + 2 * hd
    params = a["vocab"] * h + a["layers"] * per_layer + h  # embeddings tied with the LM head
    lora = a["layers"] * sum(rank * (x + y) for m, (x, y) in mods.items() if m in targets)
    return params, lora, a


def safetensors_header(path: str) -> Dict[str, Any]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        if n > 100 * MIB:
            raise ValueError("header too large")
        return json.loads(f.read(n))


def shape_of(tensor: object, meta: object) -> List[int]:
    """A tensor's shape from its safetensors header entry: whole numbers, or ValueError naming
    the tensor (a damaged or hostile header must be a sentence, not a TypeError)."""
    shape = meta.get("shape") if isinstance(meta, dict) else None
    if shape is None:
        return []
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape
    ):
        raise ValueError(
            "tensor %r has a shape that is not a list of whole numbers" % str(tensor)[:80]
        )
    return shape


def checkpoint_shapes(
    base: str, targets: Iterable[str], rank: int
) -> Tuple[int, int, Dict[str, Any]]:
    """(P, L, dims) for a local checkpoint, from safetensors headers and config.json."""
    params = lora = 0
    files = sorted(f for f in os.listdir(base) if f.endswith(".safetensors"))
    for name in files:
        for tensor, meta in safetensors_header(os.path.join(base, name)).items():
            if tensor == "__metadata__":
                continue
            shape = shape_of(tensor, meta)
            numel = 1
            for d in shape:
                numel *= d
            params += numel
            parts = tensor.split(".")
            if (
                len(shape) == 2
                and len(parts) >= 2
                and parts[-1] == "weight"
                and parts[-2] in targets
            ):
                lora += rank * (shape[0] + shape[1])
    if not files:  # .bin or other weights: assume 2 bytes per parameter
        params = (
            sum(
                os.path.getsize(os.path.join(base, f))
                for f in os.listdir(base)
                if f.endswith((".bin", ".pt", ".pth"))
            )
            // 2
        )
    dims: Dict[str, Any] = {}
    try:
        with open(os.path.join(base, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        cfg = cfg.get("text_config") or cfg
        dims = dict(
            vocab=cfg["vocab_size"],
            hidden=cfg["hidden_size"],
            inter=cfg["intermediate_size"],
            layers=cfg["num_hidden_layers"],
        )
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    return params, lora, dims


def fp8_weight_bytes(out: int, inn: int) -> int:
    """What `fp8.Fp8Weight` holds for one out x in weight (0 where float8 matmuls cannot take it)."""
    return 2 * out * inn + 4 * (out + inn) if out % 16 == 0 and inn % 16 == 0 else 0


def fp8_copy_bytes(base: str, targets: Iterable[str]) -> int:
    """Bytes of base_fp8's float8 copies: every 2-D weight of a target module without a bias (what
    `fp8.apply_fp8` converts), from the architecture table or the checkpoint's safetensors headers."""
    if base.startswith("random:"):
        a = ARCHS[base.split(":", 1)[1]]
        return a["layers"] * sum(
            fp8_weight_bytes(y, x) for m, (x, y) in arch_modules(a).items() if m in targets
        )
    total = 0
    for name in sorted(f for f in os.listdir(base) if f.endswith(".safetensors")):
        header = safetensors_header(os.path.join(base, name))
        for tensor, meta in header.items():
            if tensor == "__metadata__":
                continue
            shape = shape_of(tensor, meta)
            parts = tensor.split(".")
            # an embedding is no Linear (the trainer refuses it as a target); a biased Linear stays bf16
            if (
                len(shape) == 2
                and len(parts) >= 2
                and parts[-1] == "weight"
                and parts[-2] in targets
                and "embed" not in parts[-2]
                and tensor[: -len("weight")] + "bias" not in header
            ):
                total += fp8_weight_bytes(shape[0], shape[1])
    return total
