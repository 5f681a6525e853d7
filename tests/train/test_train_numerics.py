"""Numbers that can be wrong: the loss falls on a corpus there is something to learn from; the
saved adapter, loaded by stock peft, gives the trained model's logits; on `random:tiny` in
float32 the loss curve and the learning rates match transformers' Trainer + peft step for step.
CPU, in process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train import models  # noqa: E402
from fleetdeck.backend.train.runconfig import RunConfig  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _corpus(path: Path, docs: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path


def _random_docs(n: int, seed: int = 1) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]


def _cfg(tmp: Path, corpus: Path, **kw) -> RunConfig:
    values = dict(
        name="n",
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp / "run"),
        seq_len=64,
        batch_size=4,
        grad_accum=1,
        max_steps=8,
        lr=1e-3,
        eval_fraction=0.0,
        seed=7,
    )
    values.update(kw)
    return RunConfig(**values)


def _train(cfg: RunConfig) -> tuple:
    engine, train, _, schedule = prepare(cfg, 0, 1, lambda m: None)
    losses, lrs = [], []
    for step in range(engine.max_steps):
        loss, _, _ = engine.step(train, schedule.rows(step, 0))
        losses.append(loss)
        lrs.append(engine.last_lr)
    return engine, train, schedule, losses, lrs


def test_loss_falls_on_a_learnable_corpus(tmp_path):
    docs = ["the quick brown fox jumps over the lazy dog. " * 3] * 40
    cfg = _cfg(tmp_path, _corpus(tmp_path / "c.jsonl", docs), max_steps=30, lr=5e-3)
    _, _, _, losses, _ = _train(cfg)
    assert all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(258), abs=0.3), "a random model starts near uniform"
    late = sum(losses[-5:]) / 5
    # a fall of over a nat: the byte distribution of one repeated sentence alone is ~3 nats below uniform
    assert late < losses[0] - 1.0, f"loss did not fall: {losses[0]:.3f} -> {late:.3f}"
    assert late < min(losses[:5]), "the last steps are the best ones"


def test_saved_adapter_loads_in_stock_peft_with_the_trained_logits(tmp_path):
    from peft import PeftModel

    cfg = _cfg(tmp_path, _corpus(tmp_path / "c.jsonl", _random_docs(40)), max_steps=6, lr=1e-2)
    engine, _, _, _, _ = _train(cfg)
    ids = torch.tensor([[ord(c) for c in "alpha beta gamma delta"]])
    models.set_attention(engine.model, "sdpa")
    engine.model.eval()
    with torch.no_grad():
        trained = engine.model(input_ids=ids).logits
    engine.save_adapter(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size > 0
    base = models.build_model("random:tiny", torch.float32, torch.device("cpu"), "sdpa", cfg.seed)
    with torch.no_grad():
        plain = base(input_ids=ids).logits
    loaded = PeftModel.from_pretrained(base, str(tmp_path / "adapter"))
    loaded.eval()
    with torch.no_grad():
        again = loaded(input_ids=ids).logits
    assert (trained - plain).abs().max() > 1e-3, "training left the model unchanged"
    torch.testing.assert_close(again, trained, rtol=1e-5, atol=1e-5)


def test_loss_curve_and_learning_rate_match_hf_trainer_and_peft(tmp_path):
    """Same rows in the same order, one document per row: fleetdeck's step loss (the mean over
    every labelled token of the step) and the lr each step used equal the Trainer's."""
    pytest.importorskip("accelerate")
    from torch.utils.data import SequentialSampler
    from transformers import Trainer, TrainingArguments

    from fleetdeck.backend.train.lora import apply_lora, plan_targets
    from fleetdeck.backend.train.reference_rows import PaddedRows

    corpus = _corpus(tmp_path / "c.jsonl", _random_docs(48, seed=3))
    cfg = _cfg(tmp_path, corpus, packing=False, max_steps=8, lr=2e-3)
    engine, train, schedule, ours, our_lrs = _train(cfg)

    order = [i for step in range(cfg.max_steps) for i in schedule.rows(step, 0)]
    rows = PaddedRows(train, cfg.seq_len, 257)

    class Ordered(torch.utils.data.Dataset):
        def __len__(self):
            return len(order)

        def __getitem__(self, i):
            return rows[order[i]]

    seen: list[tuple[float, float]] = []

    class Recording(Trainer):
        def _get_train_sampler(self, *a, **kw):
            return SequentialSampler(self.train_dataset)

        def training_step(self, model, inputs, *a, **kw):
            lr = self.lr_scheduler.get_last_lr()[0]
            loss = super().training_step(model, inputs, *a, **kw)
            seen.append((float(loss), lr))
            return loss

    model = models.build_model("random:tiny", torch.float32, torch.device("cpu"), "sdpa", cfg.seed)
    model = apply_lora(
        model, plan_targets(model, cfg.target_modules), cfg.lora_rank, cfg.lora_alpha, 0.0
    )
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=cfg.rows_per_step,
        gradient_accumulation_steps=1,
        max_steps=cfg.max_steps,
        learning_rate=cfg.lr,
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        optim="adamw_torch",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=cfg.seed,
        logging_steps=1,
        remove_unused_columns=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Recording(model=model, args=args, train_dataset=Ordered()).train()
    theirs = [x for x, _ in seen]
    assert len(theirs) == len(ours) == cfg.max_steps
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == pytest.approx(b, rel=2e-4), (
            f"step {step + 1}: fleetdeck {a:.6f} vs Trainer {b:.6f}"
        )
    assert our_lrs == pytest.approx([lr for _, lr in seen], rel=1e-9), (
        "the lr logged is the lr the step used"
    )
    assert our_lrs[0] == pytest.approx(cfg.lr) and ours[-1] < ours[0]
