"""Choosing the attention kernel: "fa4" is a RUN.toml value; where no flash kernel can run (CPU)
the run says so and uses per-document SDPA; an unknown value is refused naming the choices; the
recipe line says why (the card's prior from `kernel_choice`, RUN.toml, any failed trial)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetdeck.backend.train import attention, recipe, varlen_kernels  # noqa: E402
from fleetdeck.backend.train.runconfig import ConfigError, RunConfig, parse_run_config  # noqa: E402
from fleetdeck.backend.train.session import prepare  # noqa: E402

pytestmark = pytest.mark.train


def test_fa4_on_a_machine_without_flash_says_so_and_uses_sdpa(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)))
    cfg = RunConfig(
        name="x",
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp_path / "o"),
        seq_len=64,
        batch_size=2,
        grad_accum=1,
        eval_fraction=0.0,
        attention="fa4",
    )
    lines: list[str] = []
    engine, *_ = prepare(cfg, 0, 1, lines.append)
    assert engine.kernel == "flash" and not engine.recipe.flash
    assert any('attention = "fa4": no flash kernel here' in line for line in lines)
    assert "per-document SDPA" in engine.recipe.describe(2)
    assert recipe.why(engine) == (
        'no CUDA GPU: attention = "fa4" in RUN.toml, so per-document SDPA; '
        "base_fp8 needs a CUDA GPU with float8 matmuls"
    )


def test_the_recipe_line_on_the_cpu_says_why(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)))
    cfg = RunConfig(
        name="x",
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(tmp_path / "o"),
        seq_len=64,
        batch_size=2,
        grad_accum=1,
        eval_fraction=0.0,
    )
    lines: list[str] = []
    engine, *_ = prepare(cfg, 0, 1, lines.append)
    (line,) = [x for x in lines if x.startswith("recipe (CPU): ")]
    why = "why: no CUDA GPU: per-document SDPA; base_fp8 needs a CUDA GPU with float8 matmuls"
    assert line.endswith("; " + why) and "attention per-document SDPA" in line
    assert recipe.line(engine) == line.removeprefix("recipe (CPU): ")


def test_fa4_trial_refuses_cpu():
    assert attention.kernel_works("fa4", torch.device("cpu"), torch.bfloat16) is False
    assert set(varlen_kernels.KERNELS) == {"cudnn", "fa4"}


def test_unknown_attention_value_is_refused_with_the_choices(tmp_path):
    text = 'name = "x"\nbase_model = "random:tiny"\ncorpus = "c.jsonl"\noutput = "o"\nattention = "fa5"\n'
    with pytest.raises(ConfigError) as e:
        parse_run_config(text, "RUN.toml", tmp_path)
    assert "fa4" in str(e.value) and "attention" in str(e.value)


def test_choose_kernel_on_the_cpu_is_per_document_sdpa_with_the_reason():
    lines: list[str] = []
    cpu = torch.device("cpu")
    assert attention.choose_kernel("auto", cpu, torch.float32, lines.append) == (
        False,
        "flash",
        "no CUDA GPU: per-document SDPA; base_fp8 needs a CUDA GPU with float8 matmuls",
    )
    assert lines == []
    flash, _, why = attention.choose_kernel("varlen", cpu, torch.float32, lines.append)
    assert not flash and lines == [
        'attention = "varlen": no flash kernel here; using per-document SDPA (same result, slower)'
    ]
    assert why.startswith('no CUDA GPU: attention = "varlen" in RUN.toml, so per-document SDPA')


def test_run_json_records_the_recipe_line_with_its_why(tmp_path):
    import subprocess
    import sys

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 6}) + "\n" for i in range(12)))
    toml = tmp_path / "r.toml"
    toml.write_text(
        f'name = "r"\nbase_model = "random:tiny"\ncorpus = "{corpus}"\noutput = "{tmp_path / "r"}"\n'
        "seq_len = 64\nbatch_size = 2\ngrad_accum = 1\nmax_steps = 1\neval_fraction = 0.0\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "train", str(toml)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "r" / "run.json").read_text())
    why = "; why: no CUDA GPU: per-document SDPA; base_fp8 needs a CUDA GPU with float8 matmuls"
    assert manifest["recipe"].endswith(why)
    assert f"recipe (CPU): {manifest['recipe']}" in (tmp_path / "r" / "train.log").read_text()
