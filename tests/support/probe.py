"""The host probe run as a subprocess over real run folders and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support.weights import safetensors


def _write_probe() -> Path:
    """The probe as a host receives it (bundled with the host library), written to one file that
    goes when the test process does."""
    import atexit
    import tempfile

    from fleetdeck.backend.fleet.link.bundle import bundle
    from fleetdeck.backend.fleet.poller import PROBE_MODULE

    fd, name = tempfile.mkstemp(prefix="fleetdeck-probe-", suffix=".py")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(bundle(PROBE_MODULE))
    atexit.register(lambda: Path(name).unlink(missing_ok=True))
    return Path(name)


PROBE = _write_probe()


def probe(req: dict, env: dict | None = None, cwd: Path | None = None) -> dict:
    """One-shot: `python probe.py REQUEST`, as a host would run it."""
    p = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(req)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def run_of(reply: dict, path: Path) -> dict:
    found = [r for r in reply["runs"] if r["path"] == str(path)]
    assert found, f"{path} not among {[r['path'] for r in reply['runs']]}"
    return found[0]


def sleeper(
    children, cwd=None, args=(), env=None, code="import time; time.sleep(120)"
) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=env)
    children.append(p)
    return p


def write_progress(
    run: Path, steps: range, max_steps: int = 159, sps: float = 2.0, extra: str = ""
) -> None:
    now = time.time()
    lines = [
        json.dumps(
            {
                "step": s,
                "max_steps": max_steps,
                "loss": round(3.5 - s / 100, 4),
                "lr": 1e-4,
                "seconds_per_step": sps,
                "tokens_per_second": 2000.0,
                "time": now - (steps[-1] - s) * sps,
            }
        )
        for s in steps
    ]
    (run / "progress.jsonl").write_text("\n".join(lines) + "\n" + extra)


def hf_state(global_step: int, max_steps: int = 159) -> dict:
    """trainer_state.json as Hugging Face's Trainer writes it (logging every 5, eval every 25 steps)."""
    evals = {25: 3.176, 50: 3.173, 75: 3.172, 100: 3.172}
    hist = []
    for s in range(5, global_step + 1, 5):
        hist.append(
            {
                "epoch": s / max_steps,
                "grad_norm": 0.5,
                "learning_rate": 1e-4,
                "loss": round(3.6 - s / 200, 4),
                "step": s,
            }
        )
        if s in evals:
            hist.append(
                {
                    "epoch": s / max_steps,
                    "eval_loss": evals[s],
                    "eval_runtime": 12.5,
                    "eval_samples_per_second": 8.0,
                    "eval_steps_per_second": 1.0,
                    "step": s,
                }
            )
    return {
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": global_step / max_steps,
        "eval_steps": 25,
        "global_step": global_step,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": hist,
        "logging_steps": 5,
        "max_steps": max_steps,
        "num_input_tokens_seen": 0,
        "num_train_epochs": 1,
        "save_steps": 25,
        "stateful_callbacks": {},
        "total_flos": 1.0e15,
        "train_batch_size": 1,
        "trial_name": None,
        "trial_params": None,
    }


def checkpoint(
    run: Path, step: int, nested: bool = True, state: dict | None = None, size: int = 1000
) -> Path:
    d = run / ("checkpoints" if nested else "") / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(safetensors(b"\0" * size))
    (d / "trainer_state.json").write_text(json.dumps(state or hf_state(step), indent=2))
    return d
