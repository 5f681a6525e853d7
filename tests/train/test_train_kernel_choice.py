"""The attention kernel and the base_fp8 verdict for each compute capability, from
`kernel_choice.choose`: a pure function, so every card is judged here on a CPU. The H200 row
(sm_90, FlashAttention-4 where installed) is the benchmarked default and must not move."""

from __future__ import annotations

import pytest

from fleetdeck.backend.train import kernel_choice

#: capability -> (kernel with flash-attn-4 installed, kernel without it, base_fp8, words the reason holds)
CARDS = {
    None: (
        "sdpa",
        "sdpa",
        False,
        ["no CUDA GPU", "per-document SDPA", "base_fp8 needs a CUDA GPU"],
    ),
    (7, 5): (
        "sdpa",
        "sdpa",
        False,
        ["sm_75", "needs sm_80 or newer", "no float8 matmuls before sm_89"],
    ),
    (8, 0): (
        "flash",
        "flash",
        False,
        ["sm_80 (Ampere)", "bundled flash varlen", "no float8 matmuls before sm_89"],
    ),
    (8, 6): (
        "flash",
        "flash",
        False,
        ["sm_86 (Ampere)", "bundled flash varlen", "base_fp8 is refused"],
    ),
    (8, 9): ("flash", "flash", True, ["sm_89 (Ada)", "bundled flash varlen", "base_fp8 may run"]),
    (9, 0): ("fa4", "flash", True, ["sm_90 (Hopper)", "FlashAttention-4", "base_fp8 may run"]),
    (10, 0): (
        "fa4",
        "flash",
        True,
        ["sm_100 (datacenter Blackwell)", "FlashAttention-4", "base_fp8 may run"],
    ),
    (12, 0): (
        "flash",
        "flash",
        False,
        [
            "sm_120 (Blackwell: RTX 50xx",
            "Hopper and datacenter-Blackwell kernels do not run here",
            "row-wise float8 matmul",
            "base_fp8 is refused",
        ],
    ),
    (12, 1): (
        "flash",
        "flash",
        False,
        [
            "sm_121 (Blackwell: GB10",
            "Hopper and datacenter-Blackwell kernels do not run here",
            "row-wise float8 matmul",
            "base_fp8 is refused",
        ],
    ),
}


@pytest.mark.parametrize("cap", list(CARDS), ids=lambda c: "cpu" if c is None else f"{c[0]}.{c[1]}")
def test_each_compute_capability_gets_its_kernel_and_base_fp8_verdict_with_the_reason(cap):
    with_fa4, without_fa4, fp8, words = CARDS[cap]
    got = kernel_choice.choose(cap, fa4=True, flash=True, float8=True)
    assert (got.kernel, got.base_fp8) == (with_fa4, fp8)
    for w in words:
        assert w in got.reason
    assert got.reason.count(". ") == 0 and "\n" not in got.reason  # one sentence
    assert got.reason.endswith(got.fp8_why) and got.kernel_why in got.reason
    bare = kernel_choice.choose(cap, fa4=False, flash=True, float8=True)
    assert (bare.kernel, bare.base_fp8) == (without_fa4, fp8)
    if cap == (9, 0):
        assert "flash-attn-4 is not installed" in bare.reason


def test_what_is_missing_from_torch_decides_before_the_card():
    no_flash = kernel_choice.choose((9, 0), fa4=True, flash=False, float8=True)
    assert no_flash.kernel == "sdpa" and "no flash attention kernel" in no_flash.reason
    no_fp8 = kernel_choice.choose((9, 0), fa4=True, flash=True, float8=False)
    assert no_fp8.kernel == "fa4" and not no_fp8.base_fp8 and "torch._scaled_mm" in no_fp8.reason


def test_a_card_newer_than_the_table_gets_the_bundled_kernel_behind_its_trial():
    got = kernel_choice.choose((13, 0), fa4=True, flash=True, float8=True)
    assert got.kernel == "flash" and not got.base_fp8 and "newer than this table" in got.reason
