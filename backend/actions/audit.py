"""The append-only audit log of every action (the state folder: `fleet/statedir.py`).

An action writes its record before it touches anything, and `audit` returns only once the
whole record is on disk (every byte written, fsynced); otherwise it raises `AuditError`, whose
sentence says why (disk full, quota, file size limit...), and the action must not go ahead.
Records are JSON with every non-ASCII character escaped, so a path holding bytes that are not
UTF-8 is kept exactly and never breaks a reader. The records' kinds are declared in
`audit_records.py`; their wording as text is `show/audit_text.py`.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import socket
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet.statedir import state_dir
from fleetdeck.backend.host.lib.text import shown

_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "the file has reached the largest size this process may write",
    errno.EROFS: "the filesystem is read-only",
    errno.EACCES: "permission denied",
}


class AuditError(OSError):
    """The audit log could not be written; `message` is one sentence naming the file and why."""

    def __init__(self, path: Path, err: OSError) -> None:
        why = _WHY.get(err.errno or 0, err.strerror or str(err))
        super().__init__(
            err.errno,
            f"the audit log {shown(str(path))} could not be written: {why} ({err.strerror or err})",
        )
        self.message = self.strerror


#: the proposal an action is carried out for (`{"id", "origin"}`), set by whoever carries it
#: out; every record written meanwhile names it as `for_proposal`
FOR_PROPOSAL: ContextVar[dict[str, Any] | None] = ContextVar("for_proposal", default=None)


def audit_path() -> Path:
    """Where the audit log lives (one JSON record per line)."""
    return state_dir() / "audit.jsonl"


def audit(action: str, host: str | None, result: str, **fields: Any) -> dict[str, Any]:
    """Append one action record; return it only when all of it is written and fsynced.

    `result` is a short word (`done`, `refused`, `failed`, `started`, `verified`...);
    `fields` carry what the action records. Raises AuditError when the record cannot be
    written whole; a partial record is cut off again, so the log never holds a torn line.
    """
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ts": time.time(),
        "user": user(),
        "controller": socket.gethostname(),
        "host": host,
        "action": action,
        "result": result,
        **fields,
    }
    if (acting_for := FOR_PROPOSAL.get()) is not None and "proposal" not in fields:
        record["for_proposal"] = acting_for
    # ASCII JSON: surrogate-escaped path bytes travel as \\udcXX and come back exactly
    line = (json.dumps(record, default=str, ensure_ascii=True) + "\n").encode("ascii")
    try:
        path = audit_path()
    except OSError as e:
        raise AuditError(
            Path(os.environ.get("XDG_STATE_HOME") or "~/.local/state") / "fleetdeck", e
        ) from None
    append_whole(path, line)
    return record


def append_whole(path: Path, data: bytes) -> None:
    """Append `data` to `path` completely and fsync it, or raise AuditError leaving the file
    as it was. Writers lock the file, so records from two processes never interleave."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise AuditError(path, e) from None
    start = None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = os.fstat(fd).st_size
        if start and os.pread(fd, 1, start - 1) != b"\n":
            data = b"\n" + data  # a crash left a torn line: never glue a record onto it
        view = memoryview(data)
        done = 0
        while done < len(data):
            n = os.write(fd, view[done:])  # a short write is followed by another, or by its error
            if n <= 0:
                raise OSError(errno.EIO, "the write wrote nothing")
            done += n
        os.fsync(fd)
    except OSError as e:
        if start is not None:
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                pass
        raise AuditError(path, e) from None
    finally:
        os.close(fd)


def read_audit() -> list[dict[str, Any]]:
    """Every audit record, oldest first; a torn line (crash mid-write) is skipped."""
    try:
        raw = audit_path().read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            rec = json.loads(line.decode("utf-8", "surrogateescape"))
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


#: the keys every record has, before its action's own
COMMON = ("time", "ts", "user", "controller", "host", "action", "result")


def user() -> str:
    """Who acts: the login name, or the uid when there is none."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
