"""RUN.toml's `base_fp8`: the frozen base products in float8 (backend/train/fp8.py). On the CPU,
where torch runs float8 matmuls too: the product and the input's gradient stay near float32
arithmetic, no gradient reaches a frozen weight, the LoRA parameters still learn, and the
engine refuses the key on a device without float8 matmuls. The speed is measured on an H200
(`benchmarks/train_bench.py --levers base-fp8`, benchmarks/results/SUMMARY.md)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train import fp8  # noqa: E402
from fleetdeck.backend.train.runconfig import parse_run_config  # noqa: E402

from support.tiny_engine import HEAD, tiny_engine  # noqa: E402

pytestmark = pytest.mark.train


def rel(a, b) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


def test_the_key_parses_strictly():
    assert parse_run_config(HEAD + "base_fp8 = true\n", "RUN.toml").base_fp8 is True
    assert parse_run_config(HEAD, "RUN.toml").base_fp8 is False
    with pytest.raises(Exception) as e:
        parse_run_config(HEAD + 'base_fp8 = "auto"\n', "RUN.toml")
    assert type(e.value).__name__ == "ConfigError" and "base_fp8" in str(e.value)


def test_the_product_and_the_input_gradient_stay_near_float32():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 96, generator=g, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(48, 96, generator=g, dtype=torch.bfloat16) * 96**-0.5
    dy = torch.randn(64, 48, generator=g, dtype=torch.bfloat16)
    out = fp8.fp8_linear(x, fp8.Fp8Weight(w))
    out.backward(dy)
    want = x.detach().float() @ w.float().t()
    assert out.dtype == torch.bfloat16 and out.shape == (64, 48)
    # e4m3 keeps 3 mantissa bits: a product a few percent from float32, never more
    assert 1e-3 < rel(out, want) < 0.08
    assert 1e-3 < rel(x.grad, dy.float() @ w.float()) < 0.08
    # a row of zeros is no division by zero
    z = fp8.fp8_linear(torch.zeros(16, 96, dtype=torch.bfloat16), fp8.Fp8Weight(w))
    assert torch.isfinite(z).all() and not z.any()


def test_a_cpu_run_refuses_the_key_with_the_reason(tmp_path):
    with pytest.raises(Exception) as e:
        tiny_engine(tmp_path, "r", base_fp8=True)
    assert (
        type(e.value).__name__ == "ModelError"
        and "float8" in str(e.value)
        and "cpu" in str(e.value)
    )


def test_every_base_product_runs_in_float8_and_the_adapters_still_learn(tmp_path):
    engine, train = tiny_engine(tmp_path, "r")
    b = engine.batch(train, train.rows[:4])
    loss = engine.loss_sum(b, 1.0)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.requires_grad}
    engine.model.zero_grad(set_to_none=True)

    n = fp8.apply_fp8(engine.model)
    layers = engine.shapes.layers
    # per layer: the q/k/v and gate/up groups, o and down
    assert n == 4 * layers
    groups = [
        g
        for m in engine.model.modules()
        for g in (getattr(m, "_fd_qkv", None), getattr(m, "_fd_gate_up", None))
        if g is not None
    ]
    assert groups and all(g.fp8 is not None and not g.lora_in_base for g in groups)
    loss8 = engine.loss_sum(b, 1.0)
    loss8.backward()
    assert float(loss8) == pytest.approx(float(loss), rel=0.02)
    for name, p in engine.model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            assert rel(p.grad, grads[name]) < 0.25, (
                name
            )  # the same direction, float8's noise on top
        else:
            assert p.grad is None, f"a frozen weight got a gradient: {name}"


def _peft_linear(out_features: int = 48, in_features: int = 32):
    from peft import LoraConfig, get_peft_model
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(in_features, out_features, bias=False)

        def forward(self, x):
            return self.proj(x)

    torch.manual_seed(0)
    pm = get_peft_model(
        M().to(torch.bfloat16), LoraConfig(r=4, target_modules=["proj"], lora_alpha=8)
    )
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    return pm


def test_columns_in_memory_and_a_merged_adapter_are_handled(tmp_path):
    w = torch.randn(48, 96, dtype=torch.bfloat16) * 96**-0.5
    x = torch.randn(96, 64, dtype=torch.bfloat16).t()  # 64 rows, column-major
    assert not x.is_contiguous()
    assert rel(fp8.fp8_linear(x, fp8.Fp8Weight(w)), x.float() @ w.float().t()) < 0.08

    pm = _peft_linear()
    x = torch.randn(8, 32, dtype=torch.bfloat16)
    with_lora = pm(x).detach()
    assert fp8.apply_fp8(pm) == 1
    assert rel(pm(x), with_lora) < 0.08
    # merged into the weight after its float8 copies were made: the merged weight runs, as bf16
    pm.merge_adapter()
    assert rel(pm(x), with_lora) < 0.02
    pm.unmerge_adapter()
    pm.save_pretrained(tmp_path / "a")
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "a" / "adapter_model.safetensors")
    assert saved and all("lora_" in k for k in saved), sorted(saved)
    merged = pm.merge_and_unload()
    assert rel(merged(x), with_lora) < 0.02


def test_a_weight_whose_sides_are_not_multiples_of_16_stays_bf16():
    pm = _peft_linear(out_features=40)
    assert fp8.apply_fp8(pm) == 0
