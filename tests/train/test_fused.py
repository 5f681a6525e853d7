"""Fused projections (q/k/v and gate/up as one matmul each) change only the arithmetic's shape:
the loss and every adapter gradient equal the unfused model's in float32, the weights stay the
same tensors, and a module that cannot be fused exactly (dropout, disabled adapters) keeps its
own forward. CPU, `random:tiny`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train.runconfig import RunConfig  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train

DOCS = [
    "first document, short",
    "the second one is a little longer than that",
    "third",
    "a fourth document about nothing at all",
    "fifth and last",
] * 3


def _engine(tmp: Path, name: str, **kw):
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    cfg = RunConfig(
        name=name,
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp / name),
        seq_len=128,
        batch_size=4,
        grad_accum=1,
        eval_fraction=0.0,
        packing=True,
        seed=5,
        **kw,
    )
    engine, train, _, _ = prepare(cfg, 0, 1, lambda m: None)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():  # LoRA B starts at zero; make every adapter matter
        for n, p in sorted(engine.model.named_parameters()):
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return engine, train


def _loss_and_grads(engine, split):
    engine.optimizer.zero_grad(set_to_none=True)
    b = engine.batch(split, split.rows[:4])
    loss = engine.loss_sum(b, 1.0)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.requires_grad}
    return float(loss.detach()), grads


def test_fused_loss_and_every_adapter_gradient_equal_unfused(tmp_path):
    fused, split = _engine(tmp_path, "fused", fused_projections=True)
    plain, split2 = _engine(tmp_path, "plain", fused_projections=False)
    assert fused.recipe.fused_layers == 2 and plain.recipe.fused_layers == 0
    assert "fused in 2 layers" in fused.recipe.describe(2)
    lf, gf = _loss_and_grads(fused, split)
    lp, gp = _loss_and_grads(plain, split2)
    assert lf == pytest.approx(lp, rel=1e-5)
    assert gf.keys() == gp.keys() and len(gf) == 2 * 7 * 2
    for n in gf:
        err = float((gf[n] - gp[n]).norm() / gp[n].norm())
        assert err < 1e-5, (n, err)
        assert gf[n].abs().sum() > 0, n
    # the frozen weights are the same values, and the state dict has the same keys
    sd_f, sd_p = fused.model.state_dict(), plain.model.state_dict()
    assert sd_f.keys() == sd_p.keys()
    for k in sd_f:
        assert torch.equal(sd_f[k], sd_p[k]), k


def test_fused_weights_are_views_of_one_buffer(tmp_path):
    engine, _ = _engine(tmp_path, "views", fused_projections=True)
    attn = engine.layers[0].self_attn
    q, k, v = (getattr(attn, n).base_layer.weight for n in ("q_proj", "k_proj", "v_proj"))
    assert (
        q.untyped_storage().data_ptr()
        == k.untyped_storage().data_ptr()
        == v.untyped_storage().data_ptr()
    )
    assert attn._fd_qkv.weight.shape[0] == q.shape[0] + k.shape[0] + v.shape[0]


def test_dropout_keeps_projections_apart(tmp_path):
    engine, _ = _engine(tmp_path, "dropout", lora_dropout=0.1, fused_projections=True)
    assert engine.recipe.fused_layers == 0
    assert "fused" not in engine.recipe.describe(2)


def test_disabled_adapters_fall_back_to_each_projection(tmp_path):
    fused, split = _engine(tmp_path, "fd", fused_projections=True)
    plain, split2 = _engine(tmp_path, "pd", fused_projections=False)
    b1, b2 = fused.batch(split, split.rows[:2]), plain.batch(split2, split2.rows[:2])
    with torch.no_grad(), fused.model.disable_adapter(), plain.model.disable_adapter():
        h1, h2 = fused.hidden(b1), plain.hidden(b2)
    assert torch.allclose(h1, h2, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        h3 = fused.hidden(b1)
    assert not torch.allclose(h1, h3, atol=1e-4)  # the adapters do change the output


def test_under_bfloat16_autocast_fused_matches_unfused_within_rounding(tmp_path):
    fused, split = _engine(tmp_path, "fa", fused_projections=True)
    plain, split2 = _engine(tmp_path, "pa", fused_projections=False)
    out = []
    for engine, sp in ((fused, split), (plain, split2)):
        engine.optimizer.zero_grad(set_to_none=True)
        b = engine.batch(sp, sp.rows[:4])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = engine.hidden(b)
        loss = (h.float() ** 2).mean()
        loss.backward()
        grads = {n: p.grad for n, p in engine.model.named_parameters() if p.requires_grad}
        assert all(
            g.dtype == torch.float32 for g in grads.values()
        )  # adapters and their grads stay float32
        out.append((float(loss.detach()), grads))
    (lf, gf), (lp, gp) = out
    assert lf == pytest.approx(lp, rel=2e-2)
    for n in gf:
        err = float((gf[n] - gp[n]).norm() / gp[n].norm())
        assert err < 5e-2, (n, err)
