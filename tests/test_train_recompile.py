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
    corpus.write_text("".join(json.dumps({"text": "word " * (2 + (i * 7) % 40)}) + "\n" for i in range(80)))
    cfg = RunConfig(name="r", base_model="random:tiny", corpus=str(corpus), output=str(tmp_path / "r"),
                    seq_len=64, batch_size=1, grad_accum=1, eval_fraction=0.0, packing=True, seed=3,
                    compile=True, fused_projections=True)
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
