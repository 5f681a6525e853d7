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

ENV = dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")


def run(argv, data=None, timeout=30, cwd=None):
    """(rc, stdout bytes, first line of stderr) of a fixed argv, in the C locale."""
    r = runner.run(argv, data=data, timeout=timeout, cwd=cwd, env=ENV)
    return r.rc, r.out, runner.first_line(r.err)


def sha(data):
    """The sha256 of `data`, as hex."""
    return hashlib.sha256(data).hexdigest()


def stamp():
    """A UTC time and this process's id, for the name of a backup or a temporary file."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-%d" % os.getpid()


def safe(name):
    """`name` as a part of a file name: only letters, digits, `._-`, at most 80."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "_"
