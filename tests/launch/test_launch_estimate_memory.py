"""The launch estimate's memory on unified memory (GB10: the driver reports no total, so the GPU's
memory is the host's MemAvailable) and with `base_fp8 = true` (its float8 copies, as many bytes
as `fp8.Fp8Weight` holds). The estimate takes the nvidia-smi table as data, so a unified-memory
host is a table here; the bytes of the float8 copies are checked against the trainer's own."""

from __future__ import annotations

import json
import struct

import pytest

from fleetdeck.backend.host.launch import estimate as est
from fleetdeck.backend.host.launch import resources, shapes
from fleetdeck.backend.host.lib import units

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CFG = dict(
    base_model="random:qwen3-0.6b",
    seq_len=4096,
    gradient_checkpointing="auto",
    max_steps=10,
    target_modules=TARGETS,
    lora_rank=32,
)


def gb10(n=1, free=100 * est.GIB):
    return {
        "gpus": [
            {"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA GB10", "unified": True, "free": free}
            for i in range(n)
        ],
        "apps": [],
        "error": None,
    }


def discrete(free=100 * est.GIB):
    return {
        "gpus": [
            {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200", "unified": False, "free": free}
        ],
        "apps": [],
        "error": None,
    }


def test_unified_memory_is_one_check_against_memavailable_saying_so():
    e = est.estimate(CFG, gb10(), 10**6)
    assert e["unified_memory"] is True and e["device"] == "cuda"
    # the trainer holds the corpus's text and its tokens as int32 in the one memory
    assert e["memory_parts"]["corpus"] == 10**6 + 4 * 10**6
    h200 = est.estimate(CFG, discrete(), 10**6)
    assert "corpus" not in h200["memory_parts"] and h200["unified_memory"] is False
    # weights once, at two bytes a parameter: no host copy beside the GPU's
    assert e["memory_parts"]["weights"] == h200["memory_parts"]["weights"] == e["params"] * 2
    assert e["memory_bytes"] == h200["memory_bytes"] + 5 * 10**6
    checks: list[dict] = []
    resources.check_memory(checks, CFG, gb10(), e, None)
    (c,) = checks
    assert c["ok"] is True
    assert c["message"].startswith(
        "GPU 0 shares the host's memory (unified memory): 100.0 GiB available "
        "(MemAvailable); the run needs about "
    )
    assert "weights counted once, host and GPU being one memory" in c["message"]
    checks = []
    resources.check_memory(checks, CFG, gb10(free=e["memory_bytes"] - 1), e, None)
    assert [c["ok"] for c in checks] == [False]


def test_unified_gpus_share_one_memavailable_not_one_each():
    cfg = dict(CFG, gpus=2)
    e = est.estimate(cfg, gb10(2), 10**6)
    table = gb10(2, free=e["memory_bytes"] * 3 // 2)  # room for one process, not for two
    checks: list[dict] = []
    resources.check_memory(checks, cfg, table, e, None)
    (c,) = checks
    assert c["ok"] is False and c["message"].startswith(
        "GPUs 0, 1 share the host's memory (unified memory)"
    )
    assert (
        f"the run needs about {units.size(2 * e['memory_bytes'])} (2 processes x " in c["message"]
    )


def test_what_the_awaited_run_holds_on_unified_memory_counts_as_free(tmp_path):
    prev = tmp_path / "prev"
    prev.mkdir()
    (prev / "run.json").write_text(json.dumps({"pid": 4242, "state": "running"}))
    e = est.estimate(CFG, gb10(), 10**6)
    table = gb10(free=e["memory_bytes"] - est.GIB)
    table["apps"] = [{"pid": 4242, "uuid": "GPU-0", "used": 2 * est.GIB}]
    checks: list[dict] = []
    resources.check_memory(checks, CFG, table, e, str(prev))
    (c,) = checks
    assert c["ok"] is True and "2.0 GiB of it held now by the run it waits for" in c["message"]


def test_base_fp8_adds_its_float8_copies_of_the_target_linears_only():
    off = est.estimate(CFG, discrete(), 10**6)
    on = est.estimate(dict(CFG, base_fp8=True), discrete(), 10**6)
    a = shapes.ARCHS["qwen3-0.6b"]
    h, i, hd = a["hidden"], a["inter"], a["head_dim"]
    sides = [
        (a["heads"] * hd, h),
        (a["kv"] * hd, h),
        (a["kv"] * hd, h),
        (h, a["heads"] * hd),
        (i, h),
        (i, h),
        (h, i),
    ]
    want = a["layers"] * sum(2 * o * n + 4 * (o + n) for o, n in sides)
    assert "base_fp8" not in off["memory_parts"]
    assert on["memory_parts"]["base_fp8"] == want
    assert on["memory_bytes"] == off["memory_bytes"] + want
    # two bytes a parameter of the projections (and their float32 scales), none for the
    # embeddings (151,936 x 1,024 here) or the norms
    proj = a["layers"] * sum(o * n for o, n in sides)
    assert want == 2 * proj + 4 * a["layers"] * sum(o + n for o, n in sides)
    assert proj == on["params"] - a["vocab"] * h - a["layers"] * (2 * h + 2 * hd) - h
    attn_only = est.estimate(
        dict(CFG, base_fp8=True, target_modules=["q_proj", "v_proj"]), discrete(), 10**6
    )
    assert attn_only["memory_parts"]["base_fp8"] == a["layers"] * sum(
        2 * o * n + 4 * (o + n) for o, n in (sides[0], sides[2])
    )
    checks: list[dict] = []
    resources.check_memory(checks, CFG, discrete(), on, None)
    assert "base/fp8 " in checks[0]["message"]


def test_base_fp8_from_a_checkpoint_skips_biased_odd_and_untargeted_weights(tmp_path):
    header = {
        "model.layers.0.self_attn.q_proj.weight": {
            "dtype": "BF16",
            "shape": [256, 128],
            "data_offsets": [0, 0],
        },
        "model.layers.0.self_attn.k_proj.weight": {
            "dtype": "BF16",
            "shape": [64, 128],
            "data_offsets": [0, 0],
        },
        "model.layers.0.self_attn.k_proj.bias": {
            "dtype": "BF16",
            "shape": [64],
            "data_offsets": [0, 0],
        },
        "model.layers.0.mlp.down_proj.weight": {
            "dtype": "BF16",
            "shape": [128, 100],
            "data_offsets": [0, 0],
        },
        "model.layers.0.mlp.up_proj.weight": {
            "dtype": "BF16",
            "shape": [512, 128],
            "data_offsets": [0, 0],
        },
        "model.layers.0.input_layernorm.weight": {
            "dtype": "BF16",
            "shape": [128],
            "data_offsets": [0, 0],
        },
        "model.embed_tokens.weight": {
            "dtype": "BF16",
            "shape": [1024, 128],
            "data_offsets": [0, 0],
        },
        "__metadata__": {"format": "pt"},
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    # k_proj has a bias (the trainer leaves it bf16), down_proj's 100 is no multiple of 16,
    # up_proj is no target, the norm and the embeddings are no projection
    got = shapes.fp8_copy_bytes(
        str(tmp_path), {"q_proj", "k_proj", "down_proj", "embed_tokens", "input_layernorm"}
    )
    assert got == 2 * 256 * 128 + 4 * (256 + 128)


def test_the_estimate_counts_what_the_trainer_holds_for_a_float8_weight():
    torch = pytest.importorskip("torch")
    from fleetdeck.backend.train.fp8 import Fp8Weight

    w = torch.randn(384, 128, dtype=torch.bfloat16)
    f = Fp8Weight(w)
    held = sum(t.numel() * t.element_size() for t in (f.fwd, f.fwd_scale, f.grad, f.grad_scale))
    assert held == shapes.fp8_weight_bytes(384, 128) == 2 * 384 * 128 + 4 * (384 + 128)


@pytest.mark.parametrize(
    "shape", [["a", "b"], [1.5, 2], "256x128", [True, 2], [-1, 4], [{"n": 1}], 7]
)
def test_a_damaged_header_is_an_unknown_shape_not_a_crash(tmp_path, shape):
    """A checkpoint whose safetensors header gives a shape that is not whole numbers: the
    estimate says the shapes are unknown, as for an unreadable header, instead of a TypeError
    the launch helper would answer as `internal`."""
    header = {
        "model.layers.0.self_attn.q_proj.weight": {
            "dtype": "BF16",
            "shape": shape,
            "data_offsets": [0, 0],
        },
        "model.layers.0.self_attn.k_proj.weight": "not an object",
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 128, "num_hidden_layers": 1}))
    with pytest.raises(ValueError, match="q_proj.weight"):
        shapes.fp8_copy_bytes(str(tmp_path), {"q_proj"})
    got = est.estimate({**CFG, "base_model": str(tmp_path), "base_fp8": True}, discrete(), 100)
    assert got["shapes_known"] is False and got["memory_parts"]["base_fp8"] == 0
