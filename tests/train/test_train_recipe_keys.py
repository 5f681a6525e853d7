"""The recipe's levers are RUN.toml keys (no module switches): `lora_in_base` and `cross_entropy`
parse strictly, and each changes only how the arithmetic runs, never the loss. CPU, `random:tiny`."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetdeck.backend.train.runconfig import parse_run_config

from support.tiny_engine import HEAD, tiny_engine

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

pytestmark = pytest.mark.train


def test_lever_keys_parse_strictly():
    cfg = parse_run_config(HEAD + 'lora_in_base = false\ncross_entropy = "compiled"\n', "RUN.toml")
    assert cfg.lora_in_base is False and cfg.cross_entropy == "compiled"
    default = parse_run_config(HEAD, "RUN.toml")
    assert default.lora_in_base == "auto" and default.cross_entropy == "auto"
    for bad in ('cross_entropy = "full"', 'lora_in_base = "yes"', "cross_entropy = 1"):
        with pytest.raises(Exception) as e:
            parse_run_config(HEAD + bad + "\n", "RUN.toml")
        assert type(e.value).__name__ == "ConfigError" and bad.split(" ")[0] in str(e.value)


def _engine(tmp: Path, name: str, **kw):
    engine, train = tiny_engine(tmp, name, **kw)
    b = engine.batch(train, train.rows[:4])
    return engine, float(engine.loss_sum(b, 1.0).detach())


def test_lora_in_base_and_cross_entropy_keys_change_no_loss(tmp_path):
    joined, loss = _engine(tmp_path, "joined")
    apart, loss_apart = _engine(tmp_path, "apart", lora_in_base=False, cross_entropy="eager")
    groups = [m._fd_gate_up for m in joined.model.modules() if hasattr(m, "_fd_gate_up")]
    groups_apart = [m._fd_gate_up for m in apart.model.modules() if hasattr(m, "_fd_gate_up")]
    assert groups and all(g.lora_in_base for g in groups)
    assert groups_apart and not any(g.lora_in_base for g in groups_apart)
    assert "LoRA product apart" in apart.recipe.describe(
        2
    ) and "apart" not in joined.recipe.describe(2)
    assert apart.recipe.ce == "eager"
    assert loss_apart == pytest.approx(loss, rel=1e-5)
