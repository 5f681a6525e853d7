"""A training checkpoint folder and the engine's state in it: the adapter (peft's safetensors),
the optimizer, the schedule, every RNG, and trainer_state.json (what the dashboard reads).
`save_checkpoint` writes them into a folder the caller then renames into place (rank 0 only);
`load_checkpoint` restores them into an engine built for the same model. Imports torch; peft
and safetensors when a checkpoint is loaded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .loop import Engine


def save_checkpoint(engine: Engine, folder: Path, state: dict) -> None:
    """Adapter, optimizer, schedule, RNG and trainer_state.json into `folder` (rank 0)."""
    folder.mkdir(parents=True, exist_ok=True)
    engine.save_adapter(folder)
    torch.save(engine.optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(engine.scheduler.state_dict(), folder / "scheduler.pt")
    rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if engine.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(engine.device)
    torch.save(rng, folder / "rng_state.pt")
    (folder / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")


def load_checkpoint(engine: Engine, folder: Path) -> dict:
    """Restore what `save_checkpoint` wrote into `engine`; returns its trainer_state."""
    # deferred: peft and safetensors (only a resumed run loads them)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(str(folder / "adapter_model.safetensors"), device=str(engine.device))
    result = set_peft_model_state_dict(engine.model, weights)
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if missing:
        raise RuntimeError(f"checkpoint {folder} does not fit this model ({missing[0]})")
    for p in engine.params:
        p.data = p.data.float()
    engine.optimizer.load_state_dict(
        torch.load(folder / "optimizer.pt", map_location=engine.device)
    )
    engine.scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=False))
    rng = torch.load(folder / "rng_state.pt", weights_only=False)
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and engine.device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], engine.device)
    return json.loads((folder / "trainer_state.json").read_text())


__all__ = ["load_checkpoint", "save_checkpoint"]
