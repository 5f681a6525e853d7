"""Compiled layers take the number of packed ranges as a dynamic size from the first batch: a
later batch with another number of documents runs without a recompile (which would stall that
step, a timed one in the bench or one deep into training). CPU, `random:tiny`, torch.compile."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train.runconfig import RunConfig  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train


def test_a_batch_with_another_number_of_documents_does_not_recompile(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    # documents of very different lengths, so rows hold different numbers of them
    corpus.write_text(
        "".join(json.dumps({"text": "word " * (2 + (i * 7) % 40)}) + "\n" for i in range(80))
    )
    cfg = RunConfig(
        name="r",
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp_path / "r"),
        seq_len=64,
        batch_size=1,
        grad_accum=1,
        eval_fraction=0.0,
        packing=True,
        seed=3,
        compile=True,
        fused_projections=True,
    )
    torch._dynamo.reset()
    engine, split, _, _ = prepare(cfg, 0, 1, lambda m: None)
    engine.set_recipe(1, 0)
    assert engine.recipe.compile
    ranges = {i: len(r) for i, r in enumerate(split.rows)}
    first = split.rows[0]
    other = next(i for i, n in ranges.items() if n != len(first))
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    # the decoder layer's own compiled frame (the reference attention used on the CPU loops over
    # the ranges in Python and recompiles its own piece per count: that is not what is checked)
    code = type(engine.layers[0]).forward.__code__
    engine.step(split, [0])
    compiled = len(_debug_get_cache_entry_list(code))
    assert compiled >= 1
    loss = engine.step(split, [other])[0]
    assert len(_debug_get_cache_entry_list(code)) == compiled
    assert loss == loss


def test_a_partial_row_or_short_micro_batch_does_not_recompile(tmp_path):
    """The corpus's last row is partial and an eval micro-batch can hold fewer rows: with compiled
    layers each packed micro-batch is filled up to a full one's length with ranges that predict
    nothing, so the layers never compile again for a new sequence length mid-training (on an
    H200 that recompile stalled step 7 of a 12-step run for 17 s)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": "word " * (3 + (i * 5) % 30)}) + "\n" for i in range(60))
    )
    cfg = RunConfig(
        name="r",
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp_path / "r"),
        seq_len=64,
        batch_size=1,
        grad_accum=1,
        eval_fraction=0.0,
        packing=True,
        seed=3,
        compile=True,
        fused_projections=True,
    )
    torch._dynamo.reset()
    engine, split, _, _ = prepare(cfg, 0, 1, lambda m: None)
    engine.set_recipe(1, 0)
    full = [i for i, r in enumerate(split.rows) if sum(e - s for s, e in r) == 64]
    short = len(split.rows) - 1
    assert sum(e - s for s, e in split.rows[short]) < 64, "the corpus ends in a partial row"
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    code = type(engine.layers[0]).forward.__code__
    engine.step(split, full[:1])
    compiled = len(_debug_get_cache_entry_list(code))
    _, tokens, _ = engine.step(split, [short])
    assert len(_debug_get_cache_entry_list(code)) == compiled
    assert tokens == sum(e - s for s, e in split.rows[short]), "the filler is not counted as tokens"
    b = engine.batch(split, [split.rows[short]])
    assert b.input_ids.shape[1] == 64 and b.tokens < 64 and int(b.cu_seqlens[-1]) == 64
    assert int((b.labels != -100).sum()) == b.targets
    # two rows per forward: one row alone (a short eval micro-batch) is filled up to two rows
    engine.set_recipe(2, 0)
    b = engine.batch(split, [split.rows[short]])
    assert b.input_ids.shape[1] == 128 and all(int(n) <= 64 for n in b.cu_seqlens.diff())


def test_filler_ranges_change_no_loss():
    from array import array

    from fleetdeck.backend.train.batching import IGNORE, make_batch
    from fleetdeck.backend.train.corpus import Split

    split = Split(array("i", range(10, 60)), [[(0, 20), (20, 50)]])
    plain = make_batch(split, split.rows, torch.device("cpu"), 32)
    filled = make_batch(split, split.rows, torch.device("cpu"), 32, pad_to=100)
    assert plain.input_ids.shape[1] == 50 and filled.input_ids.shape[1] == 100
    assert filled.cu_seqlens.tolist() == [0, 20, 50, 82, 100]  # filler ranges of at most max_len
    assert (filled.labels[0, 50:] == IGNORE).all() and filled.targets == plain.targets
    assert (
        (filled.tokens, filled.attn_sq) == (plain.tokens, plain.attn_sq) == (50, 20 * 20 + 30 * 30)
    )
