"""The run folder's rules that need no torch: a rerun's run.json keys are its own, and a folder
holding a final adapter (the project's one rule) is never trained over."""

from __future__ import annotations

import pytest

from support.weights import safetensors

pytestmark = pytest.mark.train


def test_a_rerun_records_its_own_recipe_not_the_earlier_attempts(tmp_path):
    from fleetdeck.backend.train.rundir import RunDir, new_manifest, set_state

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    first = new_manifest({}, {"name": "r"}, "sha", 1)
    set_state(run, first, "running")
    on_disk = run.read_manifest()
    on_disk.update(recipe="torch.compile on", packing={"used": True})
    run.write_manifest(on_disk)
    set_state(run, first, "failed", error="killed")
    second = new_manifest(run.read_manifest(), {"name": "r"}, "sha", 1)
    set_state(run, second, "running")
    on_disk = run.read_manifest()
    on_disk.update(recipe="torch.compile off", packing={"used": False})
    run.write_manifest(on_disk)
    set_state(run, second, "finished")
    final = run.read_manifest()
    assert final["recipe"] == "torch.compile off" and final["packing"] == {"used": False}
    assert [s["state"] for s in final["states"]] == ["running", "failed", "running", "finished"]


def test_a_folder_with_a_final_adapter_is_never_trained_over(tmp_path):
    """The project's one rule: a real folder with a non-empty adapter_model.safetensors and an
    adapter_config.json, in adapter/ or at the run root (HF's save_model(output_dir))."""
    from fleetdeck.backend.train.rundir import RunDir, RunRefused

    root = tmp_path / "hf-run"
    root.mkdir()
    (root / "adapter_model.safetensors").write_bytes(safetensors(b"x" * 16))
    (root / "adapter_config.json").write_text("{}")
    with pytest.raises(RunRefused, match="already finished"):
        RunDir(root).check_reusable()
    empty = tmp_path / "empty-adapter"
    (empty / "adapter").mkdir(parents=True)
    (empty / "adapter" / "adapter_model.safetensors").write_bytes(b"")
    (empty / "adapter" / "adapter_config.json").write_text("{}")
    (empty / "run.json").write_text('{"state": "failed"}')
    assert RunDir(empty).check_reusable()["state"] == "failed", (
        "an empty adapter file is no final adapter"
    )
