"""`fleetdeck watch` as a process over a fleet file of one local host, and its state folder."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

WATCH = [sys.executable, "-m", "fleetdeck.cli.main"]


def rising_evals(run: Path) -> None:
    run.mkdir(parents=True, exist_ok=True)
    rows = [
        {"step": s, "max_steps": 200, "loss": 3.0, "eval_loss": v, "time": time.time()}
        for s, v in ((25, 3.20), (50, 3.17), (75, 3.18), (100, 3.19))
    ]
    (run / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def local_fleet(tmp_path: Path, runs: Path, alerts: str = "", extra_hosts: str = "") -> Path:
    f = tmp_path / "hosts.toml"
    f.write_text(
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{runs}"]\n{extra_hosts}\n'
        f'[alerts]\ndisabled = ["new-stray", "disk-full-eta", "idle-holder", "gpu-headroom"]\n{alerts}'
    )
    return f


def state_dir() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "fleetdeck"
