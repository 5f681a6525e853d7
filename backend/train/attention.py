"""Attention that never crosses a document: flash varlen on CUDA, per-range SDPA elsewhere.

Kernels for the packed ranges, each behind a trial against per-document SDPA: torch's bundled
FlashAttention-2 ("flash", always there on sm80+), FlashAttention-4's CuTe DSL kernels ("fa4",
the `flash-attn-4` package, sm90 and newer) and cuDNN's ("cudnn").

The trainer feeds a micro-batch as one flat sequence (batch dimension 1) with position ids that
restart at every document piece and `cu_seq_lens_q` (cumulative range lengths, int32). The
function registered here as `fleetdeck_varlen` attends causally inside each range only, and no
attention mask is built (transformers skips mask creation for attention functions it does not
know a mask for).

Which kernel runs: `kernel_choice.choose` gives the prior for the card's compute capability and
what is installed (with the reason the recipe line prints); `choose_kernel` runs the trials
behind it, and a trial that fails has the last word, logged with its reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from . import kernel_choice
from .varlen_kernels import KERNELS, FlashVarlen, fa4_installed, run_varlen, varlen_reference

if TYPE_CHECKING:
    from collections.abc import Callable

NAME = "fleetdeck_varlen"


@torch.compiler.disable
def kernel_works(
    kernel: str,
    device: torch.device,
    dtype: torch.dtype,
    log: Callable[..., object] | None = None,
) -> bool:
    """Whether the fused varlen `kernel` ("cudnn", "fa4") runs here and agrees with per-document
    SDPA (forward and gradients, ranges of uneven length) within bf16 rounding; where it does
    not, says why once through `log` and the caller falls back to flash."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    fn, what = KERNELS[kernel]
    if kernel == "fa4" and not fa4_installed():
        _FAILED[(kernel, str(device))] = "flash-attn-4 is not installed"
        if log is not None:
            log(f"{what} is not installed here (pip install flash-attn-4); using flash varlen")
        return False
    why = None
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        lens = [100, 37, 251, 124]
        cu = torch.tensor(
            [0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device
        )
        t = sum(lens)
        q, k, v = (
            torch.randn(t, h, 128, device=device, dtype=dtype, generator=gen).requires_grad_()
            for h in (4, 2, 2)
        )
        g = torch.randn(t, 4, 128, device=device, dtype=dtype, generator=gen)
        out = fn(q, k, v, cu, max(lens), 128**-0.5)
        grads = torch.autograd.grad(out, (q, k, v), g)
        ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
        ref = varlen_reference(ref_in[0], ref_in[1], ref_in[2], cu, 128**-0.5)
        ref_grads = torch.autograd.grad(ref, ref_in, g.double())
        for a, b in zip((out, *grads), (ref, *ref_grads), strict=True):
            err = float((a.detach().double() - b.detach()).norm() / b.detach().norm())
            if not err < 2e-2:
                why = f"relative error {err:.2e} against per-document SDPA"
                break
    except Exception as e:  # noqa: BLE001
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
    if why:
        _FAILED[(kernel, str(device))] = why
        if log is not None:
            log(f"{what} failed its trial here ({why}); using flash varlen")
    else:
        _FAILED.pop((kernel, str(device)), None)
    return why is None


def flash_varlen_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the flash varlen kernel can run here (CUDA, sm80 or newer, half precision): the
    card's prior (`kernel_choice.choose`) is a flash kernel, not per-document SDPA."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    return prior(device, fa4=False).kernel != "sdpa"


@torch.compiler.disable
def flash_varlen_works(
    device: torch.device, dtype: torch.dtype, log: Callable[..., object] | None = None
) -> bool:
    """Whether the flash varlen kernel is available and runs forward and backward here (a tiny
    trial: a GPU generation newer than the kernels torch ships falls back to per-document SDPA)."""
    if not flash_varlen_available(device, dtype):
        return False
    try:
        q = torch.randn(64, 4, 128, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn(64, 2, 128, device=device, dtype=dtype, requires_grad=True)
        v = torch.randn(64, 2, 128, device=device, dtype=dtype, requires_grad=True)
        cu = torch.tensor([0, 20, 64], dtype=torch.int32, device=device)
        out = FlashVarlen.apply(q, k, v, cu, 64, 128**-0.5)
        torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or [""])[0][:200]
        _FAILED[("flash", str(device))] = f"{type(e).__name__}: {first}"
        if log is not None:
            log(
                f"flash varlen attention failed its trial here ({type(e).__name__}: {first}); "
                "using per-document SDPA"
            )
        return False
    _FAILED.pop(("flash", str(device)), None)
    return True


#: (kernel, device) -> why that kernel failed its trial there (the recipe line names it)
_FAILED: dict[tuple[str, str], str] = {}
#: what each kernel is called in the recipe line's reason
KERNEL_NAMES = {
    "fa4": "FlashAttention-4",
    "flash": "torch's bundled flash varlen",
    "cudnn": "cuDNN varlen",
    "sdpa": "per-document SDPA",
}


def capability(device: torch.device) -> tuple[int, int] | None:
    """The card's compute capability, or None off CUDA."""
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)


def float8_matmuls() -> bool:
    """Whether this torch has float8 tensors and their scaled matmul."""
    return hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")


def prior(device: torch.device, fa4: bool | None = None) -> kernel_choice.Choice:
    """`kernel_choice.choose` for `device` with what this process has installed (`fa4`: whether
    flash-attn-4 imports; None: try the import, only on CUDA)."""
    cap = capability(device)
    if fa4 is None:
        fa4 = cap is not None and fa4_installed()
    return kernel_choice.choose(
        cap,
        fa4=fa4,
        flash=hasattr(torch.ops.aten, "_flash_attention_forward"),
        float8=float8_matmuls(),
    )


def choose_kernel(
    requested: str, device: torch.device, dtype: torch.dtype, log: Callable[..., object]
) -> tuple[bool, str, str]:
    """(flash, kernel, reason) for RUN.toml's `attention` (`requested`): the card's prior for
    "auto", each fused kernel behind its trial (a failure logged, and the next one down used),
    and the sentence the recipe line gives for the outcome."""
    flash = requested != "sdpa" and flash_varlen_works(device, dtype, log)
    if (requested == "varlen" or requested in KERNELS) and not flash:
        log(
            f'attention = "{requested}": no flash kernel here; using per-document SDPA (same result, slower)'
        )
    kernel = "flash"
    want = requested if requested in KERNELS else None
    if requested == "auto" and flash:
        p = prior(device)
        if p.kernel == "fa4":
            want = "fa4"
        elif (capability(device) or (0, 0))[0] in (9, 10, 11) and not fa4_installed():
            log(
                "attention: torch's bundled flash varlen; FlashAttention-4 is faster on this GPU "
                "(pip install flash-attn-4, or fleetdeck[fa4])"
            )
    if want and flash and kernel_works(want, device, dtype, log):
        kernel = want
    return flash, kernel, explain(requested, device, flash, kernel)


def explain(requested: str, device: torch.device, flash: bool, kernel: str) -> str:
    """Why the run attends with `kernel` (`flash` False: per-document SDPA), in one sentence:
    the card's prior (`kernel_choice`), what RUN.toml asked for, and any trial that failed."""
    p = prior(device)
    used = kernel if flash else "sdpa"
    where = kernel_choice.card(capability(device))
    tried = {"sdpa": (), "varlen": ("flash",), "auto": (p.kernel, "flash")}.get(
        requested, (requested, "flash")
    )
    failed = [(k, _FAILED[(k, str(device))]) for k in tried if (k, str(device)) in _FAILED]
    trial = (
        f", but {KERNEL_NAMES[failed[0][0]]} was ruled out here ({failed[0][1]})" if failed else ""
    )
    if requested != "auto":
        return (
            f'{where}: attention = "{requested}" in RUN.toml{trial}, so {KERNEL_NAMES[used]}; '
            f"{p.fp8_why}"
        )
    if used == p.kernel:
        return p.reason
    if failed:
        return f"{where}: {p.kernel_why}{trial}, so {KERNEL_NAMES[used]}; {p.fp8_why}"
    return f"{where}: {p.kernel_why}, yet {KERNEL_NAMES[used]} was chosen and passed its trial; {p.fp8_why}"


_USE_FLASH: dict[str, bool] = {}
#: the fused varlen kernel chosen (a run_varlen name: "flash", or one in KERNELS that passed its trial)
_KERNEL: dict[str, str] = {}


def varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: (B=1, H, T, D) in, (1, T, H, D) out, ranges from kwargs."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        raise RuntimeError("fleetdeck_varlen attention needs cu_seq_lens_q (pass the packed batch)")
    max_len = int(kwargs.get("max_length_q") or query.shape[2])
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, H, D)
    flash = _USE_FLASH.get("on")
    if flash is None:
        flash = flash_varlen_available(q.device, q.dtype)
    if flash:
        out = run_varlen(
            _KERNEL.get("name", "flash"),
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            cu,
            max_len,
            scaling,
        )
    else:
        out = varlen_reference(q, k, v, cu, scaling)
    return out.unsqueeze(0), None


def register(force_flash: bool | None = None, kernel: str = "flash") -> str:
    """Register `fleetdeck_varlen` with transformers; returns the name to set on the config.
    `kernel` picks the fused varlen kernel where one is used: "flash", "fa4" or "cudnn"."""
    # deferred: transformers (seconds; the kernel choice is tested without it)
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, varlen_attention)
    _KERNEL["name"] = kernel
    if force_flash is None:
        _USE_FLASH.pop("on", None)
    else:
        _USE_FLASH["on"] = force_flash
    return NAME


__all__ = [
    "KERNEL_NAMES",
    "NAME",
    "capability",
    "choose_kernel",
    "explain",
    "float8_matmuls",
    "kernel_works",
    "prior",
    "register",
    "varlen_attention",
    "flash_varlen_available",
    "flash_varlen_works",
]
