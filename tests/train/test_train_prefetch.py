"""A step given the next step's rows builds that step's batches ahead; the losses are exactly
the ones of steps that build their own, and a prefetch for other rows is never used. CPU,
`random:tiny`, float32."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train.runconfig import RunConfig  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train


def _engine(tmp, name):
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"text": f"document number {i} " * (1 + i % 5)}) + "\n" for i in range(60)
        )
    )
    cfg = RunConfig(
        name=name,
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp / name),
        seq_len=64,
        batch_size=2,
        grad_accum=1,
        eval_fraction=0.0,
        packing=True,
        seed=3,
        max_steps=4,
    )
    engine, train, _, schedule = prepare(cfg, 0, 1, lambda m: None)
    return engine, train, schedule


def test_prefetched_steps_give_the_same_losses(tmp_path):
    a, split_a, sched_a = _engine(tmp_path, "a")
    b, split_b, sched_b = _engine(tmp_path, "b")
    plain = [a.step(split_a, sched_a.rows(i, 0))[0] for i in range(4)]
    ahead = [
        b.step(split_b, sched_b.rows(i, 0), sched_b.rows(i + 1, 0) if i < 3 else None)[0]
        for i in range(4)
    ]
    assert plain == ahead
    assert len(set(plain)) == 4


def test_a_prefetch_for_other_rows_is_not_used(tmp_path):
    a, split, sched = _engine(tmp_path, "c")
    b, split_b, sched_b = _engine(tmp_path, "d")
    # b prefetches rows it will not take next; its next step must build its own batches
    b.step(split_b, sched_b.rows(0, 0), sched_b.rows(3, 0))
    a.step(split, sched.rows(0, 0))
    assert b.step(split_b, sched_b.rows(1, 0))[0] == a.step(split, sched.rows(1, 0))[0]
