"""Where the controller keeps its state: `$XDG_STATE_HOME/fleetdeck` (the audit log, the
acknowledged schedules, alert and poll history, seat checks, the watch lock)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """`$XDG_STATE_HOME/fleetdeck` (default `~/.local/state/fleetdeck`), created on demand."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    d = Path(base) / "fleetdeck"
    d.mkdir(parents=True, exist_ok=True)
    return d
