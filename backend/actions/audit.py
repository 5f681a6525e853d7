"""The append-only audit log of every action (the state folder: `fleet/statedir.py`).

An action writes its record before it touches anything, and `audit` returns only once the
whole record is on disk (every byte written, fsynced); otherwise it raises `AuditError`, whose
sentence says why (disk full, quota, file size limit...), and the action must not go ahead.
Records are JSON with every non-ASCII character escaped, so a path holding bytes that are not
UTF-8 is kept exactly and never breaks a reader; `describe` renders any record as text.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet.statedir import state_dir
from fleetdeck.backend.host.lib import units
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


# -- reading records as text ---------------------------------------------------------------

COMMON = ("time", "ts", "user", "controller", "host", "action", "result")


def _text(v: Any) -> str:
    """Any value as one escaped line (no JSON)."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return shown(v)
    if isinstance(v, dict):
        return ", ".join(f"{shown(str(k))} {_text(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ", ".join(_text(x) for x in v)
    return shown(str(v))


def _purge_summary(r: dict[str, Any], size: Callable[[Any], str]) -> str:
    paths = [p for p in r.get("paths") or [] if isinstance(p, dict)]
    first = shown(str(paths[0].get("path"))) if paths else "no paths"
    parts = [first + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else "")]
    codes = sorted(
        {c.get("code", "?") for p in paths for c in p.get("refusals") or [] if isinstance(c, dict)}
    )
    if codes:
        parts.append("refused: " + ", ".join(codes))
    if r.get("result") in ("done", "unverified", "failed"):
        gone = sum(1 for p in paths if p.get("deleted"))
        parts.append(f"{gone} of {len(paths)} deleted")
    if r.get("reclaimed_bytes") is not None:
        parts.append(f"{size(r['reclaimed_bytes'])} back")
    keepers = [k for k in r.get("keepers") or [] if isinstance(k, dict)]
    if keepers and r.get("result") in ("done", "unverified"):
        bad = [k for k in keepers if k.get("sha256_after") != k.get("sha256_before")]
        parts.append(
            f"{len(bad)} keeper(s) NOT verified" if bad else f"{len(keepers)} keeper(s) verified"
        )
    if r.get("error"):
        parts.append(shown(str(r["error"])))
    return "; ".join(parts)


def _purge_details(r: dict[str, Any], size: Callable[[Any], str]) -> list[str]:
    lines = []
    for p in r.get("paths") or []:
        if not isinstance(p, dict):
            continue
        state = "deleted" if p.get("deleted") else "kept"
        lines.append(f"path {shown(str(p.get('path')))}  {size(p.get('bytes'))}  {state}")
        for c in p.get("refusals") or []:
            if isinstance(c, dict):
                lines.append(f"  {shown(str(c.get('code')))}: {shown(str(c.get('message')))}")
    conf = r.get("confirmation")
    if isinstance(conf, dict):
        for c in conf.get("paths") or []:
            if isinstance(c, dict):
                typed = "nothing" if c.get("typed") is None else shown(str(c["typed"]))
                lines.append(
                    f"confirmation ({shown(str(conf.get('via')))}): typed {typed} for "
                    f"{shown(str(c.get('path')))}: {'matched' if c.get('matched') else 'did not match'}"
                )
    for k in r.get("keepers") or []:
        if isinstance(k, dict):
            after = k.get("sha256_after")
            verdict = (
                ""
                if after is None
                else (" verified" if after == k.get("sha256_before") else " CHANGED")
            )
            lines.append(
                f"keeper {shown(str(k.get('path')))}  sha256 {k.get('sha256_before') or '?'}{verdict}"
            )
    lines.append(
        f"free before {size(r.get('free_bytes_before'))}, after {size(r.get('free_bytes_after'))}, "
        f"expected back {size(r.get('expected_bytes'))}"
    )
    lines += [f"warning: {shown(str(w))}" for w in r.get("warnings") or []]
    if r.get("error"):
        lines.append(f"error: {shown(str(r['error']))}")
    return lines


def _generic_summary(r: dict[str, Any]) -> str:
    parts: list[str] = []
    sched = r.get("schedule")
    if isinstance(sched, dict):
        parts.append(" ".join(shown(str(sched[k])) for k in ("kind", "id") if sched.get(k)))
        if sched.get("command"):
            parts.append(shown(str(sched["command"]))[:60])
    for key in ("paths", "ids"):
        v = r.get(key)
        if isinstance(v, list) and v:
            items = [x.get("path", x) if isinstance(x, dict) else x for x in v]
            parts.append(
                ", ".join(shown(str(x)) for x in items[:3])
                + (f" (+{len(items) - 3})" if len(items) > 3 else "")
            )
    for key in ("src", "dst", "run", "path"):
        if isinstance(r.get(key), str):
            parts.append(f"{key} {shown(r[key])}")
    if r.get("reason_code"):
        parts.append(f"[{shown(str(r['reason_code']))}]")
    for key in ("message", "reason", "error"):
        if r.get(key):
            parts.append(_text(r[key]))
            break
    if r.get("backup"):
        parts.append(f"backup {_text(r['backup'])}")
    if not parts:
        parts = [f"{shown(str(k))} {_text(v)}" for k, v in r.items() if k not in COMMON][:4]
    return "; ".join(p for p in parts if p)


def describe(r: dict[str, Any], size: Callable[[Any], str] = units.size) -> tuple[str, list[str]]:
    """A record as text: (one summary line, detail lines); every string escaped with `shown`,
    no JSON; `size` formats byte counts (purge records' sizes, and any field named `bytes`,
    `bytes_*` or `*_bytes`). Purge records get their own reading; any other record its fields
    one per line."""
    if (
        r.get("action") == "purge"
        and isinstance(r.get("paths"), list)
        and all(isinstance(p, dict) for p in r["paths"])
    ):
        return _purge_summary(r, size), _purge_details(r, size)
    details = [
        f"{shown(str(k))}: {size(v) if _is_size(k, v) else _text(v)}"
        for k, v in r.items()
        if k not in COMMON
    ]
    summary = _generic_summary(r)
    if _is_size("bytes", r.get("bytes")) and any(
        isinstance(r.get(k), str) for k in ("src", "dst", "path")
    ):
        summary += f"; {size(r['bytes'])}"
    return summary, details


def _is_size(key: Any, value: Any) -> bool:
    """Whether a record field is a byte count (`bytes`, `bytes_src`, `free_bytes_after`...)."""
    return (
        isinstance(key, str)
        and "bytes" in key.split("_")
        and isinstance(value, int)
        and not isinstance(value, bool)
        and abs(value) < 1 << 63
    )


def user() -> str:
    """Who acts: the login name, or the uid when there is none."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
