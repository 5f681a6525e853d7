"""What every kind of the schedules helper shares: commands run in the C locale, sha256, and
the names of its backups."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import hashlib
import os
import re
import time

from fleetdeck.backend.host.lib import runner

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Optional, Sequence, Tuple

ENV = dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")


def run(
    argv: Sequence[str],
    data: Optional[bytes] = None,
    timeout: float = 30,
    cwd: Optional[str] = None,
) -> Tuple[int, bytes, str]:
    """(rc, stdout bytes, first line of stderr) of a fixed argv, in the C locale."""
    r = runner.run(argv, data=data, timeout=timeout, cwd=cwd, env=ENV)
    return r.rc, r.out, runner.first_line(r.err)


def sha(data: bytes) -> str:
    """The sha256 of `data`, as hex."""
    return hashlib.sha256(data).hexdigest()


def stamp() -> str:
    """A UTC time and this process's id, for the name of a backup or a temporary file."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-%d" % os.getpid()


def safe(name: str) -> str:
    """`name` as a part of a file name: only letters, digits, `._-`, at most 80."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "_"
