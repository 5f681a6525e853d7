"""Packing never lets a row attend or predict across documents; targets are validated; the
chunked cross-entropy matches the plain one. CPU, `random:tiny`, float32."""

from __future__ import annotations

from array import array

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train import attention, models  # noqa: E402
from fleetdeck.backend.train.batching import (  # noqa: E402
    IGNORE,
    StepSchedule,
    linear_cross_entropy,
    make_batch,
)
from fleetdeck.backend.train.corpus import ByteTokenizer, Split, build_splits, pack  # noqa: E402
from fleetdeck.backend.train.lora import TargetError, plan_targets  # noqa: E402

pytestmark = pytest.mark.train


def test_pack_keeps_every_range_inside_one_document():
    bounds = [(0, 5), (5, 40), (40, 41), (41, 90), (90, 100)]
    rows = pack(bounds, 16, packing=True)
    for row in rows:
        assert sum(e - s for s, e in row) <= 16
        for s, e in row:
            assert any(bs <= s and e <= be for bs, be in bounds), (s, e)
    covered = sum(e - s for row in rows for s, e in row)
    assert covered == 100 - 1  # only the one-token document has nothing to predict
    assert all(sum(e - s for s, e in row) == 16 for row in rows[:-1]), "packed rows are full"
    unpacked = pack(bounds, 16, packing=False)
    assert all(len(row) == 1 for row in unpacked)


def test_batch_restarts_positions_and_never_labels_across_ranges():
    tokens = array("i", range(100))
    split = Split(tokens, [[(0, 5), (5, 16)], [(20, 36)]])
    b = make_batch(split, split.rows, torch.device("cpu"), 16)
    ids, pos, lab = b.input_ids[0].tolist(), b.position_ids[0].tolist(), b.labels[0].tolist()
    assert b.cu_seqlens.tolist() == [0, 5, 16, 32]
    assert pos == list(range(5)) + list(range(11)) + list(range(16))
    for start, end in zip(b.cu_seqlens[:-1].tolist(), b.cu_seqlens[1:].tolist(), strict=True):
        assert lab[end - 1] == IGNORE, "the last token of a range predicts nothing"
        for i in range(start, end - 1):
            assert lab[i] == ids[i + 1]
    assert b.targets == 32 - 3


@pytest.fixture(scope="module")
def tiny():
    name = attention.register(force_flash=False)
    return models.build_model("random:tiny", torch.float32, torch.device("cpu"), name, seed=3)


def _hidden(model, docs):
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(len(d)) for d in docs])[None]
    cu = torch.tensor(
        [0, *torch.tensor([len(d) for d in docs]).cumsum(0).tolist()], dtype=torch.int32
    )
    with torch.no_grad():
        return model.model(
            input_ids=ids,
            position_ids=pos,
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=64,
            max_length_k=64,
        ).last_hidden_state[0]


def test_packed_documents_see_only_themselves(tiny):
    gen = torch.Generator().manual_seed(0)
    docs = [torch.randint(0, 256, (n,), generator=gen) for n in (7, 20, 13)]
    packed = _hidden(tiny, docs)
    offset = 0
    for d in docs:
        alone = _hidden(tiny, [d])
        torch.testing.assert_close(packed[offset : offset + len(d)], alone, rtol=1e-5, atol=1e-5)
        offset += len(d)
    # the control: one causal sequence over the same row does let later documents see earlier ones
    models.set_attention(tiny, "sdpa")
    try:
        with torch.no_grad():
            leaky = tiny.model(input_ids=torch.cat(docs)[None]).last_hidden_state[0]
    finally:
        models.set_attention(tiny, attention.NAME)
    assert not torch.allclose(leaky[7:27], packed[7:27], atol=1e-4)


def test_per_document_losses_match_each_document_alone(tiny):
    tok = ByteTokenizer()
    docs = ["short one", "a somewhat longer second document", "third"]
    train, _ = build_splits(docs, tok, seq_len=64, packing=True, eval_fraction=0.0, seed=1)
    assert len(train.rows) == 1 and len(train.rows[0]) == 3
    b = make_batch(train, train.rows, torch.device("cpu"), 64)
    with torch.no_grad():
        h = tiny.model(**b.model_kwargs()).last_hidden_state[0]
        together = linear_cross_entropy(h, tiny.lm_head.weight, b.labels[0], 1.0)
        alone = 0.0
        for row_range in train.rows[0]:
            single = make_batch(train, [[row_range]], torch.device("cpu"), 64)
            hs = tiny.model(**single.model_kwargs()).last_hidden_state[0]
            alone += float(linear_cross_entropy(hs, tiny.lm_head.weight, single.labels[0], 1.0))
    assert float(together) == pytest.approx(alone, rel=1e-5)


def test_chunked_cross_entropy_matches_plain_cross_entropy():
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(50, 16, generator=gen, requires_grad=True)
    w = torch.randn(300, 16, generator=gen)
    y = torch.randint(0, 300, (50,), generator=gen)
    y[::4] = IGNORE
    ours = linear_cross_entropy(h, w, y, scale=0.1, chunk=7)
    (g_ours,) = torch.autograd.grad(ours, h)
    h2 = h.detach().clone().requires_grad_()
    ref = (
        torch.nn.functional.cross_entropy(h2 @ w.t(), y, ignore_index=IGNORE, reduction="sum") * 0.1
    )
    (g_ref,) = torch.autograd.grad(ref, h2)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)


def test_targets_are_counted_and_validated(tiny):
    plan = plan_targets(tiny, ["q_proj", "v_proj"])
    assert len(plan.modules) == 4 and plan.per_target == {"q_proj": 2, "v_proj": 2}
    assert "LoRA adapts 4 modules" in plan.summary()
    with pytest.raises(TargetError, match="'attn.qkv' matches no Linear"):
        plan_targets(tiny, ["q_proj", "attn.qkv"])


def test_vision_tower_modules_are_never_adapted_on_text():
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(4, 4)
            self.qkv = nn.Linear(4, 12)

    class Multimodal(nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = nn.ModuleList([Block() for _ in range(3)])
            self.language_model = nn.ModuleList([Block() for _ in range(2)])
            self.audio_tower = Block()

    model = Multimodal()
    plan = plan_targets(model, ["q_proj"])
    assert plan.modules == ["language_model.0.q_proj", "language_model.1.q_proj"]
    assert len(plan.skipped_tower) == 4
    assert "left 4 vision/audio tower or MTP head modules alone" in plan.summary()
    with pytest.raises(TargetError, match="only vision/audio tower"):
        plan_targets(nn.ModuleDict({"vision_tower": Block(), "lm": nn.Linear(4, 4)}), ["qkv"])


def test_step_schedule_is_deterministic_and_covers_every_row():
    s = StepSchedule(n_rows=10, rows_per_step=2, world=1, seed=5)
    first_epoch = [i for step in range(5) for i in s.rows(step, 0)]
    assert sorted(first_epoch) == list(range(10))
    again = StepSchedule(n_rows=10, rows_per_step=2, world=1, seed=5)
    assert [again.rows(k, 0) for k in range(8)] == [s.rows(k, 0) for k in range(8)]
    two = StepSchedule(n_rows=10, rows_per_step=1, world=2, seed=5)
    assert set(two.rows(0, 0)).isdisjoint(two.rows(0, 1))
