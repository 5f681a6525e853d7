"""Choosing the attention kernel: "fa4" is a RUN.toml value; where no flash kernel can run (CPU)
the run says so and uses per-document SDPA; an unknown value is refused naming the choices."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train import attention  # noqa: E402
from fleetdeck.backend.train.runconfig import ConfigError, RunConfig, parse_run_config  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train


def test_fa4_on_a_machine_without_flash_says_so_and_uses_sdpa(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)))
    cfg = RunConfig(name="x", base_model="random:tiny", corpus=str(corpus), output=str(tmp_path / "o"),
                    seq_len=64, batch_size=2, grad_accum=1, eval_fraction=0.0, attention="fa4")
    lines: list[str] = []
    engine, *_ = prepare(cfg, 0, 1, lines.append)
    assert engine.kernel == "flash" and not engine.recipe.flash
    assert any('attention = "fa4": no flash kernel here' in line for line in lines)
    assert "per-document SDPA" in engine.recipe.describe(2)


def test_fa4_trial_refuses_cpu():
    assert attention.kernel_works("fa4", torch.device("cpu"), torch.bfloat16) is False
    assert set(attention.KERNELS) == {"cudnn", "fa4"}


def test_unknown_attention_value_is_refused_with_the_choices(tmp_path):
    text = 'name = "x"\nbase_model = "random:tiny"\ncorpus = "c.jsonl"\noutput = "o"\nattention = "fa5"\n'
    with pytest.raises(ConfigError) as e:
        parse_run_config(text, "RUN.toml", tmp_path)
    assert "fa4" in str(e.value) and "attention" in str(e.value)
