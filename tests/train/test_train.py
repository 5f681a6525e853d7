"""`fleetdeck train` / `fleetdeck bench` end to end on the CPU with `random:tiny`: the run folder,
checkpoints, eval, adapter, resume after SIGKILL, refusals, strict RUN.toml, bad corpora."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

pytestmark = pytest.mark.train

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def write_corpus(path: Path, n_docs: int = 30, seed: int = 1) -> Path:
    import random

    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n_docs):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40)))
            f.write(json.dumps({"text": text}) + "\n")
    return path


def write_run(tmp: Path, name: str = "r", **keys) -> Path:
    corpus = keys.pop("corpus", None) or write_corpus(tmp / "corpus.jsonl")
    values = {
        "name": name,
        "base_model": "random:tiny",
        "corpus": str(corpus),
        "output": str(tmp / "runs" / name),
        "seq_len": 64,
        "batch_size": 2,
        "grad_accum": 2,
        "max_steps": 4,
        "eval_steps": 2,
        "save_steps": 2,
        "eval_fraction": 0.1,
        "lr": 1e-3,
    }
    values.update(keys)
    lines = []
    for k, v in values.items():
        lines.append(
            f"{k} = {json.dumps(v)}" if not isinstance(v, bool) else f"{k} = {str(v).lower()}"
        )
    toml = tmp / f"{name}.toml"
    toml.write_text("\n".join(lines) + "\n")
    return toml


def fleetdeck(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        **kw,
    )


def progress(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]


def test_train_end_to_end_writes_the_contract_layout(tmp_path):
    toml = write_run(tmp_path)
    r = fleetdeck("train", str(toml))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "r"
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["state"] == "finished"
    assert [s["state"] for s in manifest["states"]] == ["running", "finished"]
    import hashlib

    assert (
        manifest["corpus_sha256"]
        == hashlib.sha256((tmp_path / "corpus.jsonl").read_bytes()).hexdigest()
    )
    assert manifest["pid"] > 0 and manifest["host"] and manifest["start_time"] > 0
    assert manifest["config"]["base_model"] == "random:tiny"
    assert manifest["lora"]["adapted_modules"] == 14 and manifest["max_steps"] == 4
    assert manifest["packing"] == {"requested": True, "used": True, "reason": None}
    facts = manifest["corpus"]
    assert facts["documents"] == 30 and facts["sha256"] == manifest["corpus_sha256"]
    docs = [json.loads(x)["text"] for x in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    assert facts["tokens"] == sum(len(d.encode()) for d in docs) and facts["newline_tokens"] == 0
    lines = progress(run)
    assert [p["step"] for p in lines] == [1, 2, 3, 4]
    for p in lines:
        assert set(p) >= {
            "step",
            "max_steps",
            "loss",
            "lr",
            "eval_loss",
            "seconds_per_step",
            "tokens_per_second",
            "time",
        }
        assert p["max_steps"] == 4
    import math

    # a random model starts near uniform over the byte vocabulary; lr is the rate each step used
    assert abs(lines[0]["loss"] - math.log(258)) < 0.3
    assert [p["lr"] for p in lines] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    assert [p["step"] for p in lines if p["eval_loss"] is not None] == [2, 4]
    for step in (2, 4):
        cp = run / "checkpoints" / f"checkpoint-{step}"
        state = json.loads((cp / "trainer_state.json").read_text())
        assert state["global_step"] == step
        assert any("eval_loss" in h for h in state["log_history"])
        assert (cp / "adapter_model.safetensors").is_file()
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    config = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 32
    log = (run / "train.log").read_text()
    assert "LoRA adapts 14 modules" in log and "finished" in log
    assert "corpus facts: 30 documents" in log


def test_finished_run_is_never_overwritten(tmp_path):
    toml = write_run(tmp_path, max_steps=2)
    assert fleetdeck("train", str(toml)).returncode == 0
    adapter = tmp_path / "runs" / "r" / "adapter" / "adapter_model.safetensors"
    before = (adapter.read_bytes(), adapter.stat().st_mtime_ns)
    r = fleetdeck("train", str(toml))
    assert r.returncode == 1
    assert "already finished" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert (adapter.read_bytes(), adapter.stat().st_mtime_ns) == before


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    end = time.time() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early: {proc.stderr.read()}")
        if time.time() > end:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.01)


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    import torch
    from safetensors.torch import load_file

    corpus = write_corpus(tmp_path / "corpus.jsonl", n_docs=80)
    keys = dict(corpus=str(corpus), max_steps=120, save_steps=5, eval_steps=40)
    killed = write_run(tmp_path, "killed", **keys)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetdeck.cli.main", "train", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = tmp_path / "runs" / "killed"
    _wait_for(run / "checkpoints" / "checkpoint-10" / "trainer_state.json", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "adapter").exists(), "the run finished before it could be killed"
    assert json.loads((run / "run.json").read_text())["state"] == "running"  # as the kill left it

    r = fleetdeck("train", str(killed))
    assert r.returncode == 0, r.stderr
    log = (run / "train.log").read_text()
    assert "resuming from checkpoint-" in log
    steps = [p["step"] for p in progress(run)]
    assert steps == list(range(1, 121)), "a resumed run repeats no progress line and skips none"
    manifest = json.loads((run / "run.json").read_text())
    assert [s["state"] for s in manifest["states"]] == ["running", "running", "finished"]

    straight = write_run(tmp_path, "straight", **keys)
    assert fleetdeck("train", str(straight)).returncode == 0
    a = load_file(str(run / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "runs" / "straight" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


def test_two_processes_through_torchrun(tmp_path):
    """`gpus = 2` on one host: torchrun, one process each, gradients all-reduced, rank 0 writes."""
    import torch

    env = dict(os.environ)
    if torch.cuda.device_count() < 2:
        env["FLEETDECK_TRAIN_CPU_PROCESSES"] = "1"  # gloo on the CPU: same code path, no GPUs
    toml = write_run(tmp_path, gpus=2, max_steps=3, save_steps=3, eval_steps=3)
    r = fleetdeck("train", str(toml), env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    run = tmp_path / "runs" / "r"
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["state"] == "finished" and manifest["world_size"] == 2
    assert [p["step"] for p in progress(run)] == [1, 2, 3]
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    assert (run / "checkpoints" / "checkpoint-3" / "trainer_state.json").is_file()


def test_local_checkpoint_with_its_own_tokenizer(tmp_path):
    """A base model from a local folder (never a hub): its config, weights and tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    from fleetdeck.backend.train.models import qwen3_config

    ckpt = tmp_path / "ckpt"
    Qwen3ForCausalLM(qwen3_config("tiny")).save_pretrained(str(ckpt))
    vocab = {"<eos>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(str(ckpt))
    toml = write_run(
        tmp_path, base_model="ckpt", seq_len=32, max_steps=2, save_steps=2, eval_steps=2
    )
    r = fleetdeck("train", str(toml), env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "run.json").read_text())
    assert manifest["state"] == "finished" and manifest["config"]["base_model"] == str(ckpt)

    missing = write_run(tmp_path, "missing", base_model="no-such-folder")
    r = fleetdeck("train", str(missing))
    assert (
        r.returncode == 1
        and "not a local checkpoint folder" in r.stderr
        and "Traceback" not in r.stderr
    )


def test_target_matching_nothing_is_refused(tmp_path):
    toml = write_run(tmp_path, target_modules=["q_proj", "qkv_proj"])
    r = fleetdeck("train", str(toml))
    assert r.returncode == 1
    assert "'qkv_proj' matches no Linear module" in r.stderr and "Traceback" not in r.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "run.json").read_text())
    assert manifest["state"] == "failed" and "qkv_proj" in manifest["error"]


def test_corpus_with_a_bad_line_fails_naming_the_line(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"text": "fine"}\n{"text": "also fine"}\n{"text": broken}\n')
    r = fleetdeck("train", str(write_run(tmp_path, corpus=str(corpus))))
    assert r.returncode == 1
    assert "line 3" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    manifest = json.loads((tmp_path / "runs" / "r" / "run.json").read_text())
    assert manifest["state"] == "failed" and "line 3" in manifest["error"]


def test_corpus_line_without_text_and_plain_text_corpus(tmp_path):
    from fleetdeck.backend.train.corpus import CorpusError, read_documents

    bad = tmp_path / "c.jsonl"
    bad.write_text('{"text": "a"}\n\n{"content": "b"}\n')
    with pytest.raises(CorpusError, match="line 3"):
        read_documents(bad)
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("first document\n")
    (folder / "b.txt").write_text("second document\n")
    assert read_documents(folder) == ["first document\n", "second document\n"]


@pytest.mark.parametrize(
    "line, words",
    [
        ("learning_rate = 0.1", "unknown key 'learning_rate'"),
        ('seq_len = "4096"', "key 'seq_len' must be an integer"),
        ("packing = 1", "key 'packing' must be true or false"),
        ('target_modules = "q_proj"', "key 'target_modules' must be a list"),
    ],
)
def test_run_toml_is_strict(tmp_path, line, words):
    toml = write_run(tmp_path)
    key = line.split(" =")[0]
    kept = [x for x in toml.read_text().splitlines() if not x.startswith(f"{key} =")]
    toml.write_text("\n".join([*kept, line]) + "\n")
    r = fleetdeck("train", str(toml))
    assert r.returncode == 2
    assert str(toml) in r.stderr and words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_bench_reports_json(tmp_path):
    toml = write_run(tmp_path)
    r = fleetdeck("bench", str(toml), "--steps", "2", "--warmup", "1", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    (ours,) = report["results"]
    assert ours["recipe"] == "fleetdeck"
    assert ours["min_s_per_step"] <= ours["median_s_per_step"] <= ours["max_s_per_step"]
    assert 0 < ours["tokens_per_step"] <= 4 * 64  # real tokens of 4 rows of 64
    assert report["adapted_modules"] == 14 and ours["mfu"] is None  # no GPU, no matmul rate
    # the attention term counts real document lengths: short documents cost less than seq_len rows
    terms = 4 * 90240 + 6 * 65536
    assert terms < ours["flops_per_token"] < report["flops_per_token_at_seq_len"]
    assert not (tmp_path / "runs").exists(), "bench never writes the run folder"


def test_bench_baseline_runs_the_reference_recipe(tmp_path):
    pytest.importorskip("accelerate")
    toml = write_run(tmp_path, seq_len=32)
    r = fleetdeck("bench", str(toml), "--steps", "1", "--warmup", "1", "--baseline", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    by = {x["recipe"]: x for x in report["results"]}
    assert list(by) == ["fleetdeck", "reference-strong", "reference-plain", "reference"]
    ft = by["fleetdeck"]["tokens_per_second"]
    for key, recipe in (
        ("ratio", "reference-strong"),
        ("ratio_vs_plain", "reference-plain"),
        ("ratio_vs_reference", "reference"),
    ):
        assert report[key] == round(ft / by[recipe]["tokens_per_second"], 2)
    strong, plain, old = by["reference-strong"], by["reference-plain"], by["reference"]
    # reference-strong: dense full rows cut from the token stream (no padding: SDPA on the CPU),
    # the run's dropout, no checkpointing; on the CPU no batch search and no Liger
    assert (strong["lora_dropout"], strong["gradient_checkpointing"], strong["batch"]) == (
        0.0,
        False,
        4,
    )
    assert strong["attention"] == "sdpa" and strong["liger"] is False
    assert strong["tokens_per_step"] == 4 * 32, "dense rows: every token real, none padding"
    assert (
        "dense 32-token rows" in strong["description"]
        and "peft input cast off" in strong["description"]
    )
    assert (plain["lora_dropout"], plain["gradient_checkpointing"], plain["batch"]) == (
        0.0,
        False,
        4,
    )
    assert "padded to the longest row" in plain["description"]
    assert (old["lora_dropout"], old["gradient_checkpointing"], old["batch"]) == (0.05, True, 1)
    # every recipe fed the same corpus's real tokens, never padding
    assert by["fleetdeck"]["tokens_per_step"] > 0 and plain["tokens_per_step"] <= 4 * 32
    assert report["datasheet_tflops"] is None and strong["mfu"] is None  # no GPU: no datasheet rate


def test_bench_references_option_selects_and_refuses(tmp_path):
    from fleetdeck.backend.train.bench import bench_main

    toml = write_run(tmp_path)
    assert bench_main([str(toml), "--baseline", "--references", "strong,nope"]) == 2


def test_reference_strong_batch_search_is_not_limited_to_divisors():
    from fleetdeck.backend.train.reference_fit import search_batch

    def curve(limit_fit, best_at):
        # tokens/s rises to best_at, then falls; out of memory past limit_fit
        return lambda b: (
            None if b > limit_fit else 1000.0 * min(b, best_at) - 10.0 * max(0, b - best_at)
        )

    said = []
    best, seen = search_batch(curve(20, 24), said.append)
    # 1, 2, 4, 8, 16 fit, 32 does not: 24 (halfway up) does not fit either, 12 is slower; 16 wins
    assert best == 16 and seen[32] is None and 24 in seen and seen[24] is None and 12 in seen
    best, seen = search_batch(curve(40, 12), said.append)
    # 32 gains nothing on 16, nor 64: the search stops there; 12 (halfway below 16) is the best
    assert best == 12 and 128 not in seen and 24 in seen
    best, seen = search_batch(lambda b: None, said.append)
    assert best is None and list(seen) == [1]
    assert any("batch 1: out of memory" in m for m in said)


def test_fed_lengths_counts_real_tokens_of_each_feed():
    import torch

    from fleetdeck.backend.train.reference_rows import fed_lengths

    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert fed_lengths({"input_ids": torch.zeros(2, 4), "attention_mask": mask}) == [3, 2]
    assert fed_lengths(
        {"input_ids": torch.zeros(1, 9), "cu_seq_lens_q": torch.tensor([0, 4, 9])}
    ) == [4, 5]
    assert fed_lengths({"input_ids": torch.zeros(3, 8)}) == [8, 8, 8]


def test_datasheet_table_matches_gpu_names():
    from fleetdeck.backend.train.bench_figures import datasheet_tflops

    assert datasheet_tflops("NVIDIA H200") == 989.4
    assert datasheet_tflops("NVIDIA H200 NVL") == 835.5
    assert datasheet_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert datasheet_tflops("NVIDIA H100 PCIe") == 756.5
    assert datasheet_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert datasheet_tflops("NVIDIA A10") == 125.0 and datasheet_tflops("NVIDIA A10G") is None
    assert datasheet_tflops("NVIDIA L40S") == 362.05
    assert datasheet_tflops("Some Unknown GPU") is None


def test_dashboard_side_never_imports_torch():
    code = (
        "import sys, fleetdeck.cli.train, fleetdeck.backend.train.runconfig, "
        "fleetdeck.backend.train.rundir, fleetdeck.backend.train.corpus; "
        "bad = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
