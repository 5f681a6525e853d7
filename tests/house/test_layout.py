"""The run layout is one rule: the host library's, and every side that reads runs agrees with it.

Each case is a real folder tree. The expected final adapter is written once, in CASES; the host
library, the probe (run as a host runs it), purge's keeper judgement, launch's chaining and the
trainer's overwrite refusal must all agree with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetdeck.backend.host.lib import layout

from support.probe import probe
from support.weights import safetensors, write_sparse, write_torn

WEIGHTS = b"\x00" * 64


def adapter(folder: Path, weights: bytes | None = WEIGHTS, config: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if weights is not None:
        (folder / "adapter_model.safetensors").write_bytes(safetensors(weights) if weights else b"")
    if config:
        (folder / "adapter_config.json").write_text('{"r": 8}')


def fleetdeck_layout(run: Path) -> Path | None:
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter")
    return run / "adapter"


def hf_checkpoints_only(run: Path) -> Path | None:
    adapter(run / "checkpoint-10")  # a checkpoint holds an adapter too: not a final one
    (run / "checkpoint-10" / "trainer_state.json").write_text(
        '{"global_step": 10, "max_steps": 100}'
    )
    return None


def hf_root_adapter(run: Path) -> Path | None:
    adapter(run / "checkpoint-10")
    adapter(run)  # Trainer.save_model(output_dir)
    return run


def crashed_save(run: Path) -> Path | None:
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter", weights=None)  # config written, weights never were
    return None


def zero_byte_weights(run: Path) -> Path | None:
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter", weights=b"")
    return None


def torn_weights(run: Path) -> Path | None:
    """A save killed while it wrote the adapter in place: its first 100 bytes."""
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter", weights=None)
    write_torn(run / "adapter" / "adapter_model.safetensors", 100)
    return None


def sparse_weights(run: Path) -> Path | None:
    """A header promising 1 GiB and a file sized to it, nothing written: zeros the writer never
    wrote."""
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter", weights=None)
    write_sparse(run / "adapter" / "adapter_model.safetensors")
    return None


def symlinked_adapter(run: Path) -> Path | None:
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run.parent.parent / "elsewhere" / run.name)
    os.symlink(run.parent.parent / "elsewhere" / run.name, run / "adapter")
    return None


def symlinked_weights(run: Path) -> Path | None:
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter", weights=None)
    (run.parent.parent / "w.safetensors").write_bytes(safetensors(WEIGHTS))
    os.symlink(run.parent.parent / "w.safetensors", run / "adapter" / "adapter_model.safetensors")
    return None


def no_config(run: Path) -> Path | None:
    (run / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    adapter(run / "adapter", config=False)
    return None


CASES = [
    fleetdeck_layout,
    hf_checkpoints_only,
    hf_root_adapter,
    crashed_save,
    zero_byte_weights,
    torn_weights,
    sparse_weights,
    symlinked_adapter,
    symlinked_weights,
    no_config,
]


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, tuple[Path, Path | None]]:
    out = {}
    for make in CASES:
        run = tmp_path / "runs" / make.__name__
        run.mkdir(parents=True)
        out[make.__name__] = (run, make(run))
    return out


def test_the_host_library_rule(runs):
    for name, (run, expected) in runs.items():
        assert layout.final_adapter(str(run)) == (str(expected) if expected else None), name
        assert layout.is_run(os.listdir(run)), name
        if expected is None:
            assert layout.final_adapter_problem(str(run)), name


def test_the_probe_agrees(runs, tmp_path):
    rep = probe({"runs": [str(tmp_path / "runs")]})
    got = {r["name"]: r for r in rep["runs"]}
    assert set(got) == set(runs)
    for name, (_run, expected) in runs.items():
        assert got[name]["adapter"] == (str(expected) if expected else None), name
        if expected is not None:
            assert got[name]["state"] == "finished", name
    assert "adapter_model.safetensors is empty" in got["zero_byte_weights"]["reason"]
    assert "no adapter_model.safetensors" in got["crashed_save"]["reason"]
    assert "torn: adapter_model.safetensors ends at 100 of" in got["torn_weights"]["reason"]
    assert "sparse: adapter_model.safetensors has a hole" in got["sparse_weights"]["reason"]


def _checkpoint_of(run: Path) -> Path:
    return next(
        p for p in (run / "checkpoints" / "checkpoint-10", run / "checkpoint-10") if p.is_dir()
    )


def test_purge_agrees(runs, tmp_path):
    """Purging the run's checkpoint needs a keeper: exactly the runs with a final adapter have one."""
    from fleetdeck.backend.host.purge.facts import gather
    from fleetdeck.backend.host.purge.verdict import evaluate

    for name, (run, expected) in runs.items():
        facts = gather([str(_checkpoint_of(run))], [str(tmp_path / "runs")], hashing=False)
        (verdict,) = evaluate(facts)["paths"]
        assert (verdict["checks"]["no-keeper"] == "pass") == (expected is not None), (name, verdict)


def test_launch_chaining_agrees(runs):
    """A chain waiting on a finished run fires only when the run has a final adapter."""
    from fleetdeck.backend.host.launch.runfiles import after_status

    for name, (run, expected) in runs.items():
        (run / "run.json").write_text(json.dumps({"state": "finished"}))
        verdict, why = after_status(str(run))
        assert verdict == ("ready" if expected else "never"), (name, why)


def test_the_trainer_agrees(runs):
    """The trainer refuses to overwrite a folder that holds a final adapter, and only then says
    the run already finished."""
    from fleetdeck.backend.train.rundir import RunDir, RunRefused

    for name, (run, expected) in runs.items():
        with pytest.raises(RunRefused) as e:
            RunDir(run).check_reusable()
        assert ("already finished" in str(e.value)) == (expected is not None), (name, str(e.value))
