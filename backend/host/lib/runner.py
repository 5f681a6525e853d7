"""The one subprocess runner of host-side code: bytes in and out, never a shell, never raises."""
# Runs on the host's Python 3.8 or newer: PIPE pairs stay.
# ruff: noqa: UP022

from __future__ import annotations

import os
import subprocess
from collections import namedtuple
from collections.abc import Mapping, Sequence

Result = namedtuple("Result", "rc out err")
Result.__doc__ = """rc: exit status (127 when the program is missing, 124 on timeout, 126 when it
could not start); out, err: bytes."""


def run(
    argv: Sequence[str],
    data: bytes | None = None,
    timeout: float = 30,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Result:
    """Run argv (a list, no shell) and return a Result; a missing program or a timeout is a
    Result too (rc 127 / 124, the reason in `err`), so callers have one shape to judge."""
    try:
        r = subprocess.run(
            argv,
            input=data,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=None if data is not None else subprocess.DEVNULL,
            timeout=timeout,
            cwd=cwd,
            env=env,
        )
    except FileNotFoundError:
        return Result(127, b"", ("%s: not found" % argv[0]).encode())
    except subprocess.TimeoutExpired:
        return Result(124, b"", ("%s: no answer within %gs" % (argv[0], timeout)).encode())
    except OSError as e:
        return Result(126, b"", ("%s: %s" % (argv[0], e.strerror or e)).encode())
    return Result(r.returncode, r.stdout, r.stderr)


def first_line(err: bytes, limit: int = 300) -> str:
    """The first non-empty line of a tool's stderr, decoded, bounded: for a reason sentence."""
    for line in err.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line:
            return line[:limit]
    return ""


def which(name: str) -> str | None:
    """Full path of `name` on PATH, or None (shutil.which without importing shutil's bulk)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        p = os.path.join(d or ".", name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None
