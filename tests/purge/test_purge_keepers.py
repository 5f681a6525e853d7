"""Purge keepers are judged by the host library's one final-adapter rule: a real folder with a
non-empty regular adapter_model.safetensors and a regular adapter_config.json, at <run>/adapter/
or at the run root as HF's save_model leaves it. Anything else refuses `no-keeper`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetdeck.backend.host.lib import layout

from support.purge import ckpt, local_host, make_run, plan_for, purge
from support.weights import safetensors, write_sparse, write_torn


@pytest.fixture
def local(tmp_path):
    """(host config of this machine, its runs root)."""
    return local_host(tmp_path)


def _adapter(run: Path, kind: str, tmp_path: Path) -> None:
    a = run / "adapter"
    if kind == "config-only":  # what a crashed save leaves
        a.mkdir()
        (a / "adapter_config.json").write_text('{"r": 32}')
    elif kind == "weights-only":
        a.mkdir()
        (a / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(64)))
    elif kind == "zero-byte":
        a.mkdir()
        (a / "adapter_model.safetensors").write_bytes(b"")
        (a / "adapter_config.json").write_text("{}")
    elif kind == "symlinked-folder":
        real = tmp_path / "real-adapter"
        real.mkdir()
        (real / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(64)))
        (real / "adapter_config.json").write_text("{}")
        a.symlink_to(real)
    elif kind == "symlinked-weights":
        a.mkdir()
        (tmp_path / "w.safetensors").write_bytes(safetensors(os.urandom(64)))
        (a / "adapter_model.safetensors").symlink_to(tmp_path / "w.safetensors")
        (a / "adapter_config.json").write_text("{}")
    elif kind == "torn":  # a save killed while it wrote the weights in place
        a.mkdir()
        write_torn(a / "adapter_model.safetensors", 100)
        (a / "adapter_config.json").write_text("{}")
    elif kind == "torn-after-header":
        a.mkdir()
        whole = write_torn(a / "adapter_model.safetensors", 4000)
        assert whole > 4000
        (a / "adapter_config.json").write_text("{}")
    elif kind == "sparse":  # preallocated to 1 GiB, nothing written after the header
        a.mkdir()
        write_sparse(a / "adapter_model.safetensors")
        (a / "adapter_config.json").write_text("{}")
    elif kind == "weights-is-a-folder":
        a.mkdir()
        (a / "adapter_model.safetensors").mkdir()
        (a / "adapter_config.json").write_text("{}")


BAD = {
    "config-only": "it holds no adapter_model.safetensors",
    "weights-only": "it holds no adapter_config.json",
    "zero-byte": "adapter_model.safetensors is empty (0 bytes)",
    "symlinked-folder": "it is a symlink",
    "symlinked-weights": "adapter_model.safetensors is a symlink",
    "weights-is-a-folder": "adapter_model.safetensors is not a regular file",
    "torn": "torn: adapter_model.safetensors ends at 100 of",
    "torn-after-header": "torn: adapter_model.safetensors ends at 4,000 of 65,",
    "sparse": "sparse: adapter_model.safetensors has a hole at byte",
}


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_an_adapter_that_is_not_final_is_no_keeper(local, tmp_path, kind):
    host_cfg, runs = local
    run = make_run(runs, f"run {kind}", adapter=False)
    _adapter(run, kind, tmp_path)
    assert layout.final_adapter(str(run)) is None  # the library's rule, which purge must follow
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.paths[0].refused == ["no-keeper"]
    msg = plan.paths[0].refusals[0].message
    assert BAD[kind] in msg and "loses a checkpoint" in msg
    report = await purge(host_cfg, plan)
    assert not report.deleted and (ckpt(run) / "optimizer.pt").is_file()


def _hf_run(runs: Path, name: str) -> Path:
    """A run as HF's Trainer leaves it: checkpoint-N folders and, after save_model(output_dir),
    the adapter files at the run root."""
    run = runs / name
    for step in (10, 20):
        c = run / f"checkpoint-{step}"
        c.mkdir(parents=True)
        (c / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(256)))
        (c / "adapter_config.json").write_text("{}")
        (c / "optimizer.pt").write_bytes(os.urandom(512))
    (run / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(1024)))
    (run / "adapter_config.json").write_text('{"r": 8}')
    (run / "trainer_state.json").write_text("{}")
    return run


async def test_hf_root_level_adapter_is_a_keeper(local):
    host_cfg, runs = local
    run = _hf_run(runs, "hf 'run'")
    weights = (run / "adapter_model.safetensors").read_bytes()
    plan = await plan_for(host_cfg, [run / "checkpoint-10"])
    assert plan.ok, [r.message for p in plan.paths for r in p.refusals]
    assert {k.path for k in plan.keepers} == {
        str(run / "adapter_model.safetensors"),
        str(run / "adapter_config.json"),
    }
    report = await purge(host_cfg, plan)
    assert report.ok and not (run / "checkpoint-10").exists() and (run / "checkpoint-20").is_dir()
    assert all(k.verified for k in report.keepers)
    assert (run / "adapter_model.safetensors").read_bytes() == weights


async def test_hf_run_root_holding_the_adapter_is_not_purged(local):
    host_cfg, runs = local
    run = _hf_run(runs, "hf-root")
    plan = await plan_for(host_cfg, [run])
    assert "holds-final-adapter" in plan.paths[0].refused
    assert str(run) in next(
        r.message for r in plan.paths[0].refusals if r.code == "holds-final-adapter"
    )


async def test_hf_root_level_adapter_with_zero_byte_weights_is_no_keeper(local):
    host_cfg, runs = local
    run = _hf_run(runs, "hf-empty")
    (run / "adapter_model.safetensors").write_bytes(b"")
    plan = await plan_for(host_cfg, [run / "checkpoint-10"])
    assert plan.paths[0].refused == ["no-keeper"]
    assert "no adapter/ folder and no adapter at the run root" in plan.paths[0].refusals[0].message
