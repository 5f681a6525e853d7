"""The Triton cross-entropy kernel (ce_kernel.py) against float64, run by Triton's interpreter on
the CPU (a subprocess, since TRITON_INTERPRET must be set before the kernel is defined). On the
GPU the trainer checks it again with `ce_kernel.works` before using it."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="the kernel's test needs Triton (installed by the dev extra)")

CHECK = textwrap.dedent("""
    import json, sys
    import torch
    from fleetdeck.backend.train import ce_kernel
    from fleetdeck.backend.train.batching import IGNORE, _ce_chunk_inplace

    out = {}
    gen = torch.Generator().manual_seed(int(sys.argv[1]))
    for rows, vocab in [(9, 1), (13, 100), (7, 1000), (5, ce_kernel.MAX_BLOCK + 77)]:
        logits = torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * 4
        y = torch.randint(0, vocab, (rows,), generator=gen)
        y[1] = IGNORE
        y[-1] = vocab - 1
        ref = torch.nn.functional.cross_entropy(logits, y, ignore_index=IGNORE, reduction="sum")
        lg = logits.clone().requires_grad_()
        (torch.nn.functional.cross_entropy(lg, y, ignore_index=IGNORE, reduction="sum") * 0.3).backward()
        work = logits.float().contiguous()
        loss = ce_kernel.ce_rows(work, y, 0.3, IGNORE)
        grad_err = float((work.double() - lg.grad).abs().max())
        only = logits.float().contiguous()
        kept = only.clone()
        loss_only = ce_kernel.ce_rows(only, y, 0.3, IGNORE, write_grad=False)
        out[f"{rows}x{vocab}"] = dict(loss=float(loss), ref=float(ref), grad_err=grad_err,
                                      ignored_row_zero=bool((work[1] == 0).all()),
                                      loss_only=float(loss_only), untouched=bool(torch.equal(only, kept)))
    bad = torch.randn(4, 50, generator=gen)
    out["out_of_range"] = [float(ce_kernel.ce_rows(bad.clone(), torch.tensor([1, 2, lab, 3]), 1.0, IGNORE))
                           for lab in (50, -7)]
    h = torch.randn(31, 16, generator=gen)
    w = torch.randn(300, 16, generator=gen)
    y = torch.randint(0, 300, (31,), generator=gen)
    y[::4] = IGNORE
    l1, g1 = ce_kernel.chunk(h, w, y, 0.1, IGNORE)
    l2, g2 = _ce_chunk_inplace(h, w, y, 0.1)
    out["chunk"] = dict(loss=float(l1), ref=float(l2), grad_err=float((g1 - g2).abs().max()))
    out["works"] = ce_kernel.works(torch.device("cpu"), torch.float32, _ce_chunk_inplace, IGNORE)
    out["works_wrong_ref"] = ce_kernel.works(torch.device("cpu"), torch.float32,
                                             lambda h, w, y, s: _ce_chunk_inplace(h, w, y, 2 * s), IGNORE)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def results():
    import json

    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", CHECK, "3"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("shape", ["9x1", "13x100", "7x1000", "5x32845"])
def test_loss_and_gradient_match_float64(results, shape):
    r = results[shape]
    assert r["loss"] == pytest.approx(r["ref"], rel=1e-5, abs=1e-5)
    assert r["grad_err"] < 1e-5
    assert r["ignored_row_zero"], "an ignored row's gradient must be written as zeros"
    assert r["loss_only"] == pytest.approx(r["ref"], rel=1e-5, abs=1e-5)
    assert r["untouched"], "without write_grad the logits must stay as they were"


def test_chunk_matches_the_eager_chunk_function(results):
    r = results["chunk"]
    assert r["loss"] == pytest.approx(r["ref"], rel=1e-5)
    assert r["grad_err"] < 1e-5


def test_the_trial_passes_a_right_kernel_and_names_a_wrong_result(results):
    assert results["works"] is None
    assert results["works_wrong_ref"].startswith("differs from the reference (loss")


def test_a_label_outside_the_vocabulary_makes_the_loss_nan(results):
    import math

    assert all(math.isnan(v) for v in results["out_of_range"])


def test_a_kernel_that_fails_mid_run_gives_way_to_the_compiled_then_the_eager_chunk(monkeypatch):
    """What runs after a failure is decided once and said once: the kernel gives way to the
    compiled chunk function (never tried again at that vocabulary), which gives way to eager."""
    import torch

    from fleetdeck.backend.train import batching

    lines: list[str] = []
    monkeypatch.setattr(batching, "_COMPILED", {})
    monkeypatch.setitem(batching.FALLBACK_LOG, "log", lines.append)
    cuda = torch.device("cuda", 0)  # only named: nothing runs on it
    nxt = batching._give_up(
        batching._ce_chunk_kernel, RuntimeError("boom"), cuda, 151936, torch.bfloat16
    )
    assert nxt is batching._COMPILED["fn"] and nxt is not batching._ce_chunk_inplace
    assert batching._chunk_fn(cuda, 151936, torch.bfloat16) is nxt, (
        "the failed kernel is not tried again"
    )
    assert lines == [
        "the Triton cross-entropy kernel failed here (RuntimeError: boom); "
        "using the compiled chunk function"
    ]
    last = batching._give_up(nxt, ValueError("no compiler"), cuda, 151936, torch.bfloat16)
    assert last is batching._ce_chunk_inplace
    assert batching._chunk_fn(cuda, 151936, torch.bfloat16) is batching._ce_chunk_inplace
    assert lines[-1].startswith(
        "the compiled cross-entropy chunk failed here (ValueError: no compiler)"
    )
    assert batching.ce_kind(cuda, 151936, torch.bfloat16, "eager") == "eager", (
        'RUN.toml\'s cross_entropy = "eager"'
    )
