"""Hybrid models (recurrent / linear-attention layers beside attention layers) never see two
documents in one sequence: with `packing = true` in RUN.toml the trainer still gives each
document its own row, so changing one document leaves every other document's logits unchanged.
The control shows that packing such a model really would leak. Targets are counted per layer
type, and an MTP head or vision tower is never adapted. CPU, `random:tiny-hybrid`, float32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train import attention, models  # noqa: E402
from fleetdeck.backend.train.corpus import ByteTokenizer, build_splits  # noqa: E402
from fleetdeck.backend.train.lora import TargetError, plan_targets  # noqa: E402
from fleetdeck.backend.train.runconfig import RunConfig  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train

DOCS = [
    "first document, short",
    "the second one is a little longer than that",
    "third",
    "a fourth document about nothing at all",
    "fifth and last",
]


def _setup(tmp: Path, docs: list[str], name: str):
    corpus = tmp / f"{name}.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    cfg = RunConfig(
        name=name,
        base_model="random:tiny-hybrid",
        corpus=str(corpus),
        output=str(tmp / name),
        seq_len=128,
        batch_size=len(docs),
        grad_accum=1,
        eval_fraction=0.0,
        packing=True,
        seed=5,
    )
    engine, train, _, _ = prepare(cfg, 0, 1, lambda m: None)
    return engine, train


def _logits_by_document(engine, split) -> dict[bytes, torch.Tensor]:
    """Each document's logits, computed the way the trainer batches rows (all rows in one forward)."""
    group = split.rows
    b = engine.batch(split, group)
    with torch.no_grad():
        logits = engine.hidden(b) @ engine.head.weight.t()
    out, flat = {}, split.tokens
    if b.attention_mask is not None:
        width = b.input_ids.shape[1]
        for k, row in enumerate(group):
            ((s, e),) = row
            out[bytes(flat[s : e - 1])] = logits[k * width : k * width + e - s]
    else:
        offset = 0
        for row in group:
            for s, e in row:
                out[bytes(flat[s : e - 1])] = logits[offset : offset + e - s]
                offset += e - s
    return out


def test_hybrid_is_detected_and_never_packed(tmp_path):
    engine, train = _setup(tmp_path, DOCS, "a")
    assert engine.recurrent and not engine.packing
    assert models.layer_kinds(engine.model.config) == [
        "recurrent",
        "recurrent",
        "attention",
        "recurrent",
    ]
    assert all(len(row) == 1 for row in train.rows), "one document per row"
    assert len(train.rows) == len(DOCS)
    line = engine.recipe.describe(len(engine.layers))
    assert "packing off (3 of 4 layers are recurrent" in line


def test_changing_one_document_leaves_every_other_documents_logits_unchanged(tmp_path):
    engine, train = _setup(tmp_path, DOCS, "a")
    before = _logits_by_document(engine, train)
    changed = list(DOCS)
    changed[1] = (
        "an entirely different second document, longer than before, to move everything after it"
    )
    engine2, train2 = _setup(tmp_path, changed, "b")
    after = _logits_by_document(engine2, train2)
    same = [k for k in before if k in after]
    assert len(same) == len(DOCS) - 1
    for k in same:
        torch.testing.assert_close(after[k], before[k], rtol=1e-5, atol=1e-5)


def test_control_packing_a_hybrid_would_leak(tmp_path):
    """What the trainer refuses to do: the same model with documents packed in one sequence, the
    attention layers kept apart by document boundaries and the linear-attention layers given the
    flat sequence (what their reference kernels do with it; newer transformers refuse outright)."""
    engine, _ = _setup(tmp_path, DOCS, "a")
    tok = ByteTokenizer()
    engine.padded = False
    models.set_attention(engine.model, attention.register(force_flash=False))
    for layer in engine.layers:
        mixer = getattr(layer, "linear_attn", None)
        if mixer is not None:

            def flat(*a, _forward=mixer.forward, **kw):
                return _forward(
                    *a,
                    **{k: v for k, v in kw.items() if not k.startswith(("cu_seq", "max_length"))},
                )

            mixer.forward = flat
    results = []
    for docs in (DOCS, [DOCS[0], "something else entirely in second place", *DOCS[2:]]):
        packed, _ = build_splits(docs, tok, 512, True, 0.0, 5)
        assert len(packed.rows) == 1
        results.append(_logits_by_document(engine, packed))
    same = [k for k in results[0] if k in results[1]]
    assert any(not torch.allclose(results[0][k], results[1][k], atol=1e-4) for k in same), (
        "packed, one document's change reaches the documents after it"
    )


def test_targets_are_counted_per_layer_type():
    model = models.build_model("random:tiny-hybrid", torch.float32, torch.device("cpu"), "sdpa", 1)
    plan = plan_targets(model, ["q_proj", "gate_proj", "in_proj_qkv"])
    assert plan.per_layer_type == {
        "linear_attention": {"gate_proj": 3, "in_proj_qkv": 3},
        "full_attention": {"q_proj": 1, "gate_proj": 1},
    }
    assert (
        "per layer type: full_attention: q_proj x1, gate_proj x1; linear_attention: gate_proj x3, in_proj_qkv x3"
        in plan.summary()
    )


def test_mtp_head_and_vision_tower_are_never_adapted():
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(4, 4)
            self.fc = nn.Linear(4, 4)

    model = nn.ModuleDict(
        {
            "model": nn.ModuleDict({"layers": nn.ModuleList([Block(), Block()])}),
            "mtp": nn.ModuleDict({"layers": nn.ModuleList([Block()])}),
            "visual": nn.ModuleList([Block()]),
        }
    )
    plan = plan_targets(model, ["q_proj"])
    assert plan.modules == ["model.layers.0.q_proj", "model.layers.1.q_proj"]
    assert sorted(plan.skipped_tower) == ["mtp.layers.0.q_proj", "visual.0.q_proj"]
    with pytest.raises(TargetError, match="MTP head"):
        plan_targets(model, ["mtp.layers.0.fc"])
    with pytest.raises(TargetError, match="vision/audio tower or MTP head"):
        plan_targets(model, ["visual.0.fc"])
