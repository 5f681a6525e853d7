"""A `random:tiny` training engine on the CPU for the trainer's recipe tests, with every LoRA
adapter made to matter (LoRA B starts at zero)."""

from __future__ import annotations

import json
from pathlib import Path

#: the required RUN.toml keys, for tests that parse one
HEAD = 'name = "r"\nbase_model = "random:tiny"\ncorpus = "c.jsonl"\noutput = "runs/r"\n'


def tiny_engine(tmp: Path, name: str, **kw):
    """(engine, train split) of a fused `random:tiny` run in `tmp/name`; `kw`: RunConfig keys."""
    import torch

    from fleetdeck.backend.train.runconfig import RunConfig
    from fleetdeck.backend.train.session import prepare

    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": f"document {i} " * (i + 3)}) + "\n" for i in range(12))
    )
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
        fused_projections=True,
        **kw,
    )
    engine, train, _, _ = prepare(cfg, 0, 1, lambda m: None)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for n, p in sorted(engine.model.named_parameters()):
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return engine, train
