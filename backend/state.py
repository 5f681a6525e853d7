"""State kept on the controller: the append-only audit log (acknowledgements: `acks.py`)."""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    """`$XDG_STATE_HOME/fleetdeck` (default `~/.local/state/fleetdeck`), created on demand."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    d = Path(base) / "fleetdeck"
    d.mkdir(parents=True, exist_ok=True)
    return d


def audit_path() -> Path:
    return state_dir() / "audit.jsonl"


def audit(action: str, host: str | None, result: str, **fields: Any) -> dict[str, Any]:
    """Append one action record and fsync it before returning, so a crash cannot lose it.

    `result` is a short word (`done`, `refused`, `failed`, `started`, `verified`...);
    `fields` carry plan, checks, confirmation, bytes, free space before/after and so on.
    """
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ts": time.time(),
        "user": _user(),
        "controller": socket.gethostname(),
        "host": host,
        "action": action,
        "result": result,
        **fields,
    }
    line = (json.dumps(record, default=str, ensure_ascii=False) + "\n").encode("utf-8")
    # O_APPEND writes of one buffer land whole, after whatever is there: append-only by design
    fd = os.open(audit_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return record


def read_audit() -> list[dict[str, Any]]:
    """Every audit record, oldest first; a torn last line (crash mid-write) is skipped."""
    try:
        raw = audit_path().read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
