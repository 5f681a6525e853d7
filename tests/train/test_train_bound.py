"""The bound's arithmetic (backend/train/bound.py) on the CPU: the product shapes read off the
real models (built on the meta device), the matmul rate over shapes timed at different row
counts, and the tokens/s the two rates allow, checked against sums done by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from fleetdeck.backend.train import bound, bound_rates  # noqa: E402
from fleetdeck.backend.train.lora import matmul_parameter_count  # noqa: E402


@pytest.mark.parametrize("arch", ["qwen3-0.6b", "qwen3-4b", "tiny"])
def test_the_shapes_hold_every_frozen_weight_fused_or_not(arch):
    model = bound_rates.meta_model(f"random:{arch}")
    lin = bound_rates.linears(model)
    want = matmul_parameter_count(model)
    for fused in (True, False):
        assert sum(g.params for g in bound.gemm_shapes(lin, fused)) == want


def test_the_06b_shapes_are_the_trainers_products():
    lin = bound_rates.linears(bound_rates.meta_model("random:qwen3-0.6b"))
    fused = {(g.n_in, g.n_out): g.count for g in bound.gemm_shapes(lin, True)}
    # q 2048 + k 1024 + v 1024 outputs from 1024 inputs; gate and up 3072 each; the tied head
    assert fused == {
        (1024, 4096): 28,
        (2048, 1024): 28,
        (1024, 6144): 28,
        (3072, 1024): 28,
        (1024, 151936): 1,
    }
    apart = {(g.n_in, g.n_out): g.count for g in bound.gemm_shapes(lin, False)}
    assert apart[(1024, 1024)] == 56 and apart[(1024, 3072)] == 56 and apart[(1024, 2048)] == 28


def test_a_group_of_unequal_inputs_is_not_fused():
    lin = [("l.q_proj", 8, 16), ("l.k_proj", 4, 8), ("l.v_proj", 8, 8), ("m.q_proj", 8, 16)]
    shapes = {(g.n_in, g.n_out): g.count for g in bound.gemm_shapes(lin, True)}
    assert shapes == {(8, 16): 2, (4, 8): 1, (8, 8): 1}


def test_lora_params_counts_a_and_b_of_the_targets_only():
    lin = [("a.q_proj", 10, 20), ("a.o_proj", 20, 10), ("lm_head", 10, 300)]
    assert bound.lora_params(lin, ["q_proj", "o_proj"], 4) == 4 * 30 + 4 * 30
    assert bound.lora_params(lin, ["q_proj"], 2) == 2 * 30


def test_the_matmul_rate_weighs_shapes_by_their_work_not_their_timed_rows():
    shapes = [bound.Gemm(100, 200, 3), bound.Gemm(400, 50, 1)]
    # both at exactly 2e12 FLOP/s, timed at different row counts: the rate is 2e12
    rows = {(100, 200): 1000, (400, 50): 64}
    secs = {k: 4 * r * k[0] * k[1] / 2e12 for k, r in rows.items()}
    assert bound.matmul_rate(shapes, secs, rows) == pytest.approx(2e12)
    # the first at 1e12, the second at 4e12: per token 3*80,000 FLOPs at 1e12 and 80,000 at 4e12
    secs = {(100, 200): 4 * 1000 * 20_000 / 1e12, (400, 50): 4 * 64 * 20_000 / 4e12}
    want = (3 * 80_000 + 80_000) / (3 * 80_000 / 1e12 + 80_000 / 4e12)
    assert bound.matmul_rate(shapes, secs, rows) == pytest.approx(want)


def test_the_bound_of_a_06b_step_by_hand():
    # 0.6B, r 32: 4 * 595,984,384 + 6 * 20,185,088 FLOPs a token; 6 * 28 layers * 16 heads * 128
    per_token = 4 * 595_984_384 + 6 * 20_185_088
    per_sq = 6 * 28 * 16 * 128
    rates = bound.Rates(matmul=760e12, attention=534e12)
    # one 4096-token document a row: 2.5050e9 / 760e12 + 344,064 * 4096 / 534e12 s a token
    by_hand = 1 / (2_505_048_064 / 760e12 + 344_064 * 4096 / 534e12)
    got = bound.full_rows_tokens_per_second(4096, per_token, per_sq, rates)
    assert got == pytest.approx(by_hand) and 160_000 < got < 175_000
    # shorter documents attend less: two steps of 32,768 tokens in 1,000-token pieces
    tokens, sq = [32_768, 32_768], [32 * 1000**2 + 768**2] * 2
    step = 32_768 * per_token / 760e12 + sq[0] * per_sq / 534e12
    assert bound.bound_tokens_per_second(tokens, sq, per_token, per_sq, rates) == pytest.approx(
        32_768 / step
    )


def test_the_fraction_is_the_bounds_time_over_the_runs():
    per_token, per_sq = 1e9, 1e5
    rates = bound.Rates(matmul=500e12, attention=250e12)
    tokens, sq = [10_000, 12_000], [10_000 * 2000, 12_000 * 1000]
    ideal = [
        bound.step_seconds(t, s, per_token, per_sq, rates) for t, s in zip(tokens, sq, strict=True)
    ]
    assert bound.fraction(tokens, sq, ideal, per_token, per_sq, rates)["fraction_of_bound"] == 1.0
    slow = [2.5 * t for t in ideal]
    out = bound.fraction(tokens, sq, slow, per_token, per_sq, rates)
    assert out["fraction_of_bound"] == pytest.approx(0.4)
    assert out["bound_tokens_per_second"] == pytest.approx(sum(tokens) / sum(ideal), rel=1e-6)


def test_rates_of_reads_a_measurement():
    r = bound.rates_of({"matmul_tflops": 700.5, "attention_tflops": 480.25})
    assert (r.matmul, r.attention) == (700.5e12, 480.25e12)


def test_tokens_per_forward_is_whole_rows_and_capped():
    assert bound_rates.tokens_per_forward(4096, 8) == 32768
    assert bound_rates.tokens_per_forward(2048, 8) == 16384
    assert bound_rates.tokens_per_forward(4096, 64) == bound_rates.MAX_ROWS
    assert bound_rates.tokens_per_forward(3000, 64) == 30000
    assert bound_rates.tokens_per_forward(65536, 1) == 65536
