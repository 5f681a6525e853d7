"""The Unsloth reference's wiring, on the CPU without Unsloth: `--references unsloth` is accepted
and refused up front with a sentence naming what is missing; its process entry point, the
benchmark scripts and their `--help` run without a GPU; the packed feed's pieces are counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.train

ROOT = Path(__file__).resolve().parents[2]


def _run_toml(tmp: Path) -> Path:
    corpus = tmp / "corpus.jsonl"
    corpus.write_text('{"text": "alpha beta gamma delta"}\n' * 20)
    toml = tmp / "r.toml"
    toml.write_text(
        f'name = "r"\nbase_model = "random:tiny"\ncorpus = "{corpus}"\noutput = "{tmp / "runs"}"\n'
        "seq_len = 32\nbatch_size = 1\ngrad_accum = 2\n"
    )
    return toml


def test_references_unsloth_is_accepted_and_refused_naming_its_needs(tmp_path, monkeypatch, capsys):
    from fleetdeck.backend.train import unsloth_reference
    from fleetdeck.backend.train.bench import bench_main

    # an empty folder as the Unsloth process's path: nothing of Unsloth's is found there
    empty = tmp_path / "no-unsloth"
    empty.mkdir()
    monkeypatch.setenv(unsloth_reference.PATH_VAR, str(empty))
    lost = unsloth_reference.missing()
    assert lost[:2] == ["unsloth", "unsloth_zoo"], lost
    toml = _run_toml(tmp_path)
    assert (
        bench_main([str(toml), "--baseline", "--references", "unsloth,strong", "--steps", "1"]) == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one sentence, no traceback, before any model is built
    assert err[0].startswith("fleetdeck bench: --references unsloth needs Unsloth importable")
    for name in lost:
        assert name in err[0]
    assert "benchmarks/unsloth_wheels.sh" in err[0]
    assert not (tmp_path / "runs").exists()
    # a name that is no reference is still a usage error
    assert bench_main([str(toml), "--baseline", "--references", "unsloth,nope"]) == 2


def test_the_path_the_unsloth_process_gets_is_where_it_is_looked_for(tmp_path, monkeypatch):
    from fleetdeck.backend.train import unsloth_reference

    site = tmp_path / "site"
    for name in unsloth_reference.NEEDS:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    monkeypatch.setenv(unsloth_reference.PATH_VAR, str(site))
    assert unsloth_reference.missing() == []
    (site / "trl" / "__init__.py").unlink()
    (site / "trl").rmdir()
    assert unsloth_reference.missing() == ["trl"]


def test_packed_pieces_are_counted_from_what_the_trainer_feeds():
    import torch

    from fleetdeck.backend.train.unsloth_process import piece_lengths

    assert piece_lengths(
        {"input_ids": torch.zeros(1, 9), "packed_seq_lengths": torch.tensor([4, 5])}
    ) == [4, 5]
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    assert piece_lengths({"input_ids": torch.zeros(1, 9), "position_ids": pos}) == [3, 2, 4]
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert piece_lengths(
        {
            "input_ids": torch.zeros(2, 3),
            "attention_mask": mask,
            "position_ids": torch.zeros(2, 3, dtype=torch.long),
        }
    ) == [2, 1]


def test_the_byte_tokenizer_checkpoint_names_the_bench_ids(tmp_path):
    from transformers import AutoTokenizer

    from fleetdeck.backend.train.corpus import ByteTokenizer
    from fleetdeck.backend.train.unsloth_reference import byte_tokenizer

    byte_tokenizer().save_pretrained(str(tmp_path))
    tok = AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    assert (tok.eos_token_id, tok.pad_token_id, len(tok)) == (
        ByteTokenizer.eos_id,
        ByteTokenizer.pad_id,
        ByteTokenizer.vocab_size,
    )


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "fleetdeck.backend.train.unsloth_process", "--help"],
        [sys.executable, str(ROOT / "benchmarks" / "train_bench.py"), "--help"],
        [sys.executable, "-m", "fleetdeck.cli.main", "bench", "--help"],
    ],
)
def test_entry_points_help_without_a_gpu(argv):
    r = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout
    if "bench" in argv:
        assert "unsloth" in r.stdout  # the reference is offered where the others are


def test_benchmark_scripts_parse():
    for script in (
        "unsloth_wheels.sh",
        "unsloth_setup.sh",
        "bench_unsloth.sh",
        "device_env.sh",
        "bench_figures.sh",
        "fa4_wheels.sh",
        "fa4_setup.sh",
    ):
        r = subprocess.run(
            ["bash", "-n", str(ROOT / "benchmarks" / script)], capture_output=True, text=True
        )
        assert r.returncode == 0, (script, r.stderr)
