"""How a reference sets itself up on the card: its model (peft LoRA on the run's shapes), the
fastest attention that honours flattened documents, the allocator's expandable segments,
Liger where installed, and its per-device batch: reference-plain's bare-model memory probe
(`strongest_fit`) or reference-strong's search timed in the Trainer itself (`search_batch`,
which the Unsloth peer uses too)."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import torch

from .lora import apply_lora, plan_targets
from .models import build_model, set_attention
from .reference_rows import collate_to_longest, flattening_collator

if TYPE_CHECKING:
    from collections.abc import Callable

    from .runconfig import RunConfig

#: a probe's peak may use at most this share of the card's memory (reference-plain's bare-model
#: probe; a timed run that still runs out of memory retries one size down)
FIT_SHARE = 0.97
#: the largest per-device batch reference-strong's search tries
MAX_SEARCH_BATCH = 128


def build_reference_model(
    cfg: RunConfig,
    device: torch.device,
    dtype: torch.dtype,
    dropout: float,
    cast_input: bool = True,
) -> torch.nn.Module:
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


def _fits(
    model: torch.nn.Module,
    dataset: Any,
    batch: int,
    checkpointing: bool,
    device: torch.device,
    dtype: torch.dtype,
    log: Callable[..., object],
) -> int | None:
    """Peak bytes of one forward and backward of `batch` full-length rows, None on out of memory."""
    rows = collate_to_longest([dataset[i % len(dataset)] for i in range(batch)])
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
    cfg: RunConfig,
    model: torch.nn.Module,
    dataset: Any,
    device: torch.device,
    dtype: torch.dtype,
    log: Callable[..., object],
    below: tuple[int, bool] | None = None,
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
    trial: Callable[[int], float | None],
    log: Callable[..., object],
    limit: int = MAX_SEARCH_BATCH,
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


def strong_attention(
    model: torch.nn.Module,
    device: torch.device,
    dtype: torch.dtype,
    dataset_docs: Any,
    log: Callable[..., object],
) -> str:
    """The fastest attention implementation transformers runs here that honours flattened
    documents (FlashAttention-4, then -2), after a trial forward and backward; else SDPA."""
    if device.type != "cuda":
        return "sdpa"
    # deferred: transformers (seconds at start-up)
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
    collate = flattening_collator()
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


def _set_attn(model: torch.nn.Module, name: str) -> None:
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(inner, "set_attn_implementation"):
        inner.set_attn_implementation(name)
    set_attention(inner, name)


def expandable_segments(on: bool) -> bool:
    """Switch the CUDA caching allocator's expandable segments; whether it could."""
    try:
        torch.cuda.memory._set_allocator_settings(
            f"expandable_segments:{'True' if on else 'False'}"
        )
        return True
    except Exception:  # noqa: BLE001 - an older torch or no CUDA: the reference runs without
        return False


def liger_ready(cuda: bool) -> bool:
    if not cuda:
        return False
    try:
        # deferred: transformers (seconds at start-up)
        from transformers.utils import is_liger_kernel_available

        return bool(is_liger_kernel_available())
    except ImportError:
        return False
