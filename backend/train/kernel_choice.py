"""Which attention kernel and whether `base_fp8` fit a GPU, from its compute capability and what
is installed: the prior the trainer starts from and the reason its recipe line gives.

A pure function of facts (no CUDA, no torch import), so every card is testable on a CPU. The
trainer still runs each kernel's trial at start (`attention.flash_varlen_works`,
`attention.kernel_works`); a trial that fails has the last word and is logged with its reason.

Where the facts come from (nothing here was measured on the cards other than the H200):
- FlashAttention-4's fast kernels are Hopper's (sm_90, wgmma) and datacenter Blackwell's (sm_100
  and sm_110, tcgen05); consumer Blackwell (sm_120 RTX 50xx and RTX PRO, sm_121 GB10) has
  neither instruction. Its later releases add sm_80 and sm_120 kernels built on the warp-level MMA
  that torch's bundled FlashAttention-2 also uses; those are not measured here, so on such cards
  the bundled kernel stays the default and `attention = "fa4"` tries FlashAttention-4 behind its
  trial. Measured on an H200: FlashAttention-4 1.78x the bundled kernel, forward and backward.
- torch's bundled flash kernel needs sm_80 or newer; torch's CUDA 12.8+ wheels carry sm_120
  code, which sm_121 runs (same major version); the trial decides on the card itself.
- `base_fp8` calls `torch._scaled_mm` with row-wise scales. torch has float8 matmuls from sm_89,
  and its row-wise kernels for sm_89, sm_9x and sm_10x only (aten RowwiseScaledMM.cpp); on any
  other card the call raises "Rowwise scaling is not currently supported on your device".
"""

from __future__ import annotations

from dataclasses import dataclass

#: compute capabilities' marketing names, for the reason sentence
FAMILIES = {
    (8, 9): "Ada",
    (12, 0): "Blackwell: RTX 50xx, RTX PRO",
    (12, 1): "Blackwell: GB10, DGX Spark",
    8: "Ampere",
    9: "Hopper",
    10: "datacenter Blackwell",
    11: "Blackwell: Jetson Thor",
    12: "Blackwell",
}
#: the one FlashAttention-4 figure measured on this fleet (docs/trainer.md)
FA4_GAIN = "1.78x torch's bundled flash kernel forward and backward on an H200"


@dataclass(frozen=True)
class Choice:
    """The attention kernel for `attention = "auto"`: "fa4" (FlashAttention-4 varlen), "flash"
    (torch's bundled FlashAttention-2 varlen) or "sdpa" (per-document SDPA); whether
    `base_fp8 = true` may run; and why, in one sentence."""

    kernel: str
    base_fp8: bool
    reason: str
    #: the reason's two halves: why this kernel, and the base_fp8 verdict's why
    kernel_why: str = ""
    fp8_why: str = ""


def card(capability: tuple[int, int] | None) -> str:
    """`sm_121 (consumer Blackwell: ...)`, or "no CUDA GPU"."""
    if capability is None:
        return "no CUDA GPU"
    major, minor = capability
    family = (
        FAMILIES.get((major, minor))
        or FAMILIES.get(major)
        or ("pre-Ampere" if major < 8 else "newer than this table")
    )
    return f"sm_{major}{minor} ({family})"


def _fp8(capability: tuple[int, int], float8: bool) -> tuple[bool, str]:
    if not float8:
        return False, "this torch has no float8 matmul (torch._scaled_mm), so base_fp8 is refused"
    if capability < (8, 9):
        return False, "there are no float8 matmuls before sm_89, so base_fp8 is refused"
    if capability == (8, 9) or capability[0] in (9, 10):
        return True, "base_fp8 may run (float8 matmuls with torch's row-wise kernels)"
    return False, (
        "base_fp8 is refused: torch's row-wise float8 matmul, which it uses, has kernels "
        "for sm_89, sm_9x and sm_10x only"
    )


def _kernel(capability: tuple[int, int], fa4: bool, flash: bool) -> tuple[str, str]:
    major = capability[0]
    if major < 8:
        return "sdpa", "per-document SDPA, since torch's flash kernel needs sm_80 or newer"
    if not flash:
        return "sdpa", "per-document SDPA, since this torch has no flash attention kernel"
    if major in (9, 10, 11):
        if fa4:
            gain = FA4_GAIN if major == 9 else "its Blackwell kernels, not measured on this fleet"
            return "fa4", f"FlashAttention-4 ({gain})"
        return (
            "flash",
            "torch's bundled flash varlen, since flash-attn-4 is not installed (FlashAttention-4 runs here)",
        )
    if major == 12:
        return "flash", (
            "torch's bundled flash varlen, since FlashAttention-4's Hopper and datacenter-Blackwell "
            "kernels do not run here and its sm_120 kernels are not measured"
        )
    if major == 8:
        return (
            "flash",
            "torch's bundled flash varlen, since FlashAttention-4 is measured on Hopper only",
        )
    return "flash", "torch's bundled flash varlen, behind its trial (a card newer than this table)"


def choose(capability: tuple[int, int] | None, *, fa4: bool, flash: bool, float8: bool) -> Choice:
    """The kernel and the `base_fp8` verdict for a card of `capability` ((major, minor), None for
    the CPU), given whether flash-attn-4 imports (`fa4`), torch has its flash kernel (`flash`)
    and torch has float8 matmuls (`float8`)."""
    if capability is None:
        why, fp8_why = "per-document SDPA", "base_fp8 needs a CUDA GPU with float8 matmuls"
        return Choice("sdpa", False, f"no CUDA GPU: {why}; {fp8_why}", why, fp8_why)
    kernel, why = _kernel(capability, fa4, flash)
    allowed, fp8_why = _fp8(capability, float8)
    return Choice(kernel, allowed, f"{card(capability)}: {why}; {fp8_why}", why, fp8_why)


__all__ = ["Choice", "card", "choose"]
