"""Root's crontab, saved and put back around a test, with the backups a removal leaves."""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from fleetdeck.backend.fleet import statedir

# resolved once: a test that puts another `crontab` first on PATH must not break the restore
CRONTAB_BIN = shutil.which("crontab") or "crontab"


SPOOL = Path("/var/spool/cron/crontabs")


def read_crontab() -> bytes | None:
    p = subprocess.run([CRONTAB_BIN, "-l"], capture_output=True)
    return p.stdout if p.returncode == 0 else None


def install_crontab(text: str, tmp: Path) -> None:
    f = tmp / "crontab.in"
    f.write_text(text)
    subprocess.run([CRONTAB_BIN, str(f)], check=True)


class SavedCrontab:
    """This user's crontab as cron holds it, put back byte for byte.

    Where the Debian spool is writable (root) the spool file itself is kept, header, mode and
    owner included, and written back only if it changed: `crontab -l` is no witness (it prints a
    CR as backslash-r) and reinstalling through `crontab` would refuse a line it finds invalid.
    Elsewhere `crontab -l` and `crontab FILE` are the best there is."""

    def __init__(self) -> None:
        self.spool = SPOOL / pwd.getpwuid(os.geteuid()).pw_name
        self.direct = SPOOL.is_dir() and os.access(SPOOL, os.W_OK)
        if self.direct:
            try:
                st = self.spool.stat()
                self.data, self.meta = (
                    self.spool.read_bytes(),
                    (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid),
                )
            except FileNotFoundError:
                self.data, self.meta = None, None
        else:
            self.data, self.meta = read_crontab(), None

    def restore(self) -> None:
        if self.data is None:
            subprocess.run([CRONTAB_BIN, "-r"], capture_output=True)
            if self.direct:
                self.spool.unlink(missing_ok=True)
        elif not self.direct:
            f = Path(tempfile.mkdtemp()) / "crontab.saved"
            f.write_bytes(self.data)
            subprocess.run([CRONTAB_BIN, str(f)], check=True)
            shutil.rmtree(f.parent)
        elif not self.spool.exists() or self.spool.read_bytes() != self.data:
            tmp = SPOOL / f".{self.spool.name}.fleetdeck-restore"
            tmp.write_bytes(self.data)
            os.chmod(tmp, self.meta[0])
            os.chown(tmp, self.meta[1], self.meta[2])
            os.replace(tmp, self.spool)
            os.utime(SPOOL)  # cron rereads the spool when the folder's mtime moves


@pytest.fixture
def root_crontab(bystander, request):
    """This user's real crontab, saved before and restored after, even when the test fails
    (serialised across test runs; tests using it are marked `root`). Another user's crontab
    (`bystander`, see conftest.py) sits beside it and must come out untouched."""
    assert request.node.get_closest_marker("root"), (
        "a test that changes root's crontab is marked root"
    )
    lock = open("/tmp/fleetdeck-tests-crontab.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    saved = SavedCrontab()
    try:
        yield
    finally:
        try:
            saved.restore()
        finally:
            lock.close()
        if bystander is not None:
            bystander.check()


def backups(host: str) -> list[Path]:
    d = statedir.state_dir() / "backups" / host
    return sorted(d.iterdir()) if d.exists() else []
