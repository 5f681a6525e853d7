"""Acknowledged schedules: which entries the operator has marked as known.

Kept under the state dir (`acknowledged.json`), next to the audit log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .state import state_dir


def acks_path() -> Path:
    """Where the acknowledged set is stored."""
    return state_dir() / "acknowledged.json"


def load_acks() -> set[str]:
    """Schedule ids the operator marked as known."""
    try:
        data = json.loads(acks_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError):
        return set()
    return {str(x) for x in data.get("ids", [])} if isinstance(data, dict) else set()


def save_acks(ids: set[str]) -> None:
    """Replace the acknowledged set atomically (write, fsync, rename)."""
    path = acks_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"ids": sorted(ids)}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
