"""Launch pre-flight estimates, run on the training host (stdlib only, Python 3.8 or newer).

Bundled with `host/launch/main.py` and the host library (`fleetdeck.backend.fleet.link.bundle`). Figures are rough
upper-side estimates, stated in every check message so the operator can judge them:

- parameters P and LoRA parameters L: from the built-in architecture table for `random:<arch>`,
  else from the checkpoint's safetensors headers (exact shapes; L = rank x (in + out) summed over
  every 2-D weight whose module name is a target);
- GPU memory per GPU = P x b (b = 2 for bfloat16, 4 for float32) + L x 16 (fp32 LoRA weight,
  gradient, two Adam moments) + activations + logits + 1 GiB (CUDA context and allocator slack);
  activations per layer A = rows x seq x (12 hidden + 4 intermediate) x b; with gradient
  checkpointing (true or "auto", the trainer's minimum) layers x rows x seq x hidden x b + A,
  without it layers x A; logits = rows x seq x vocab x (2b + 12) (logits, fp32 upcast, softmax
  and gradients); rows = micro_batch (1 if "auto");
- base_fp8 = true adds each LoRA-wrapped projection's float8 copies (train/fp8.py): 2 x out x in
  + 4 x (out + in) bytes a weight (two float8 copies and their float32 scales), for the target
  linears whose sides are multiples of 16 and that have no bias (embeddings and norms have none);
- where the run's memory is the host's (the CPU, or unified memory where the driver reports no
  total, GB10) the corpus the trainer holds counts too: its text (corpus bytes) and its tokens as
  int32 (4 x tokens); the weights are counted once, host and GPU being one memory;
- disk = saves x (L x 12 + 1 MiB) + L x 4 (the adapter) + 1 MiB + steps x 300 B of logs, with
  saves = steps // save_steps and steps = max_steps, else epochs x corpus tokens / (seq_len x
  batch_size x grad_accum x gpus), where tokens = corpus bytes (byte tokenizer of random models)
  or bytes / 3 (a subword tokenizer).
"""

from __future__ import annotations

import os
import struct

from fleetdeck.backend.host.launch.shapes import arch_shapes, checkpoint_shapes, fp8_copy_bytes
from fleetdeck.backend.host.lib import units

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict

GIB = 1 << 30
MIB = 1 << 20


def corpus_bytes(path: str) -> int:
    """Bytes of the corpus file, or of every file under a corpus folder; 0 when absent."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# -- the estimate ----------------------------------------------------------------------------
def estimate(config: Dict[str, Any], gpus: Dict[str, Any], corpus_size: int) -> Dict[str, Any]:
    """Memory and disk the run needs, with the parts that make them up (see the module doc)."""
    targets = set(
        config.get("target_modules")
        or ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    rank = int(config.get("lora_rank", 32))
    base = config["base_model"]
    try:
        if base.startswith("random:"):
            params, lora, dims = arch_shapes(base.split(":", 1)[1], targets, rank)
        else:
            params, lora, dims = checkpoint_shapes(base, targets, rank)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        params, lora, dims = 0, 0, {}
    on_gpu = bool(gpus["gpus"])
    # the run's memory is the host's: no GPU, or GPUs the driver gives no memory of their own
    shared = not on_gpu or any(g["unified"] for g in gpus["gpus"][: int(config.get("gpus", 1))])
    dtype = config.get("dtype", "auto")
    b = 4 if dtype == "float32" or (dtype == "auto" and not on_gpu) else 2
    seq = int(config.get("seq_len", 4096))
    mb = config.get("micro_batch", "auto")
    rows = mb if isinstance(mb, int) and not isinstance(mb, bool) else 1
    parts = {"weights": params * b, "lora_optimizer": lora * 16}
    if dims:
        layer = rows * seq * (12 * dims["hidden"] + 4 * dims["inter"]) * b
        if config.get("gradient_checkpointing", "auto") is False:
            parts["activations"] = dims["layers"] * layer
        else:
            parts["activations"] = dims["layers"] * rows * seq * dims["hidden"] * b + layer
        # logits, their fp32 upcast, softmax and gradients: 16 B per entry at bf16 matches the
        # trainer's own measurement on an H200 (qwen3-0.6b: 10.09 GiB per 4096-token row)
        parts["logits"] = rows * seq * dims["vocab"] * (2 * b + 12)
    if config.get("base_fp8") is True and on_gpu:
        try:
            parts["base_fp8"] = fp8_copy_bytes(base, targets)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
            parts["base_fp8"] = 0
    byte_tok = base.startswith("random:") and not config.get("tokenizer")
    tokens = corpus_size if byte_tok else corpus_size // 3
    if shared:
        parts["corpus"] = corpus_size + 4 * tokens
    parts["overhead"] = GIB if on_gpu else 512 * MIB
    need = sum(parts.values())
    rows_per_step = (
        int(config.get("batch_size", 1))
        * int(config.get("grad_accum", 8))
        * int(config.get("gpus", 1))
    )
    steps = int(config.get("max_steps") or 0)
    if steps <= 0:
        share = 1.0 - float(config.get("eval_fraction", 0.05))
        steps = max(
            1, int(float(config.get("epochs", 1.0)) * tokens * share // (seq * rows_per_step)) + 1
        )
    saves = steps // max(1, int(config.get("save_steps", 25)))
    ckpt = lora * 12 + MIB
    adapter = lora * 4
    disk = saves * ckpt + adapter + MIB + steps * 300
    return {
        "params": params,
        "lora_params": lora,
        "bytes_per_param": b,
        "device": "cuda" if on_gpu else "cpu",
        "unified_memory": on_gpu and shared,
        "memory_bytes": need,
        "memory_parts": parts,
        "shapes_known": bool(dims),
        "steps": steps,
        "saves": saves,
        "checkpoint_bytes": ckpt,
        "adapter_bytes": adapter,
        "disk_bytes": disk,
    }


def parts_text(parts: Dict[str, int]) -> str:
    return " + ".join("{} {}".format(k.replace("_", "/"), units.size(v)) for k, v in parts.items())
