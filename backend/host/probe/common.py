"""What every part of the probe shares: constants, the file-parse cache, the /proc scan."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import hashlib
import math
import os
import pwd
import re
import time
from collections.abc import Callable, Container
from datetime import datetime

from fleetdeck.backend.host.lib import files, procfs, runner
from fleetdeck.backend.host.probe.proc_table import ProcTable

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from typing import Any, BinaryIO

SHELLS = set(procfs.SHELLS)
# A shell, pager, editor or copier sitting in a run folder is an operator looking, not training.
BYSTANDERS = SHELLS | {
    "less",
    "more",
    "tail",
    "head",
    "cat",
    "vi",
    "vim",
    "nvim",
    "nano",
    "emacs",
    "du",
    "ls",
    "watch",
    "rsync",
    "scp",
    "sftp-server",
    "sha256sum",
    "md5sum",
    "tar",
    "find",
    "sleep",
    "top",
    "htop",
    "nvtop",
    "tmux",
    "screen",
    "ssh",
    "sshd",
    "git",
    "cp",
    "mv",
    "rm",
}
FD_SCAN_EVERY = 20.0  # s; a full /proc/*/fd walk is the one costly scan, so it is throttled
TIMER_TTL = 30.0  # s; systemd timer listings are re-read at most this often
MIN_STALL_S = 120.0
SETTLE_S = 2.0  # s; a file's parse is kept against its stat only once its mtime is this old
SYSTEMD_BOOTED = "/run/systemd/system"  # sd_booted(3): present only when systemd is PID 1
MAX_LOSS_POINTS = 20000  # the probe remembers at most this many newest points of a series
SERIES_POINTS = 256  # and sends at most this many per series (run_progress.thin)
CRON_RE = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$")
ENV_RE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
CRON_D_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # run-parts' rule; cron skips other names

CACHE: dict = {}  # (tag, path) -> (stat key, value); file parses survive between resident polls
STATE: dict = {
    "fd_scan_at": 0.0,
    "holders": {},
    "nvml": None,
    "nvml_error": None,
    "nvml_retry": 0.0,
}
_USERS: dict = {}


# -- small helpers ----------------------------------------------------------------------------
def open_file(path: str) -> BinaryIO:
    """`open(path, "rb")` for a regular file only: a FIFO or device under a watched path (any
    user may make one) raises NotRegular at once instead of holding the resident probe."""
    return os.fdopen(files.open_regular(path, follow=True), "rb")


def read_text(path: str, limit: int = -1) -> str:
    with open_file(path) as f:
        return f.read(limit).decode("utf-8", "surrogateescape")


def stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def settled(key: object) -> bool:
    """True when a stat key's mtime is SETTLE_S or more in the past: a file written again within
    the clock's granularity can keep its mtime (and its size, and an edit in place its inode),
    so a parse kept against a key this recent is not trusted. A key that is no stat (a file
    known absent) is settled; None (nothing known) never is."""
    if not isinstance(key, tuple):
        return key is not None
    return time.time() - key[0] / 1e9 >= SETTLE_S


def cached(tag: str, path: str, parse: Callable[..., Any], st: os.stat_result | None = None) -> Any:
    """parse(path), re-run when the file's (mtime, size, inode) changed, and at every call
    while its mtime is within SETTLE_S of now (`settled`)."""
    st = st or os.stat(path)
    hit = CACHE.get((tag, path))
    if hit is not None and hit[0] == stat_key(st) and settled(hit[0]):
        return hit[1]
    val = parse(path)
    CACHE[(tag, path)] = (stat_key(st), val)
    return val


def user_name(uid: int) -> str:
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def current_user() -> str:
    return user_name(os.geteuid())


def run_text(argv: list[str], timeout: float = 10) -> tuple[int | None, str, str]:
    """(rc, stdout text, stderr text) of a fixed argv through the host library's runner, in
    the C locale; rc None when the program does not exist."""
    env = dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")
    r = runner.run(argv, timeout=timeout, env=env)
    if r.rc == 127 and not r.out:
        return None, "", ""
    return r.rc, r.out.decode("utf-8", "surrogateescape"), r.err.decode("utf-8", "replace").strip()


def legacy_sid(prefix: str, *parts: object) -> str:
    """A schedule's id as fleetdeck gave it before ids were widened (10 hex digits of sha1)."""
    return (
        prefix
        + hashlib.sha1(
            "|".join(str(p) for p in parts).encode("utf-8", "surrogateescape")
        ).hexdigest()[:10]
    )


# the largest magnitude a host figure may have (an int past it, 10**400 say, is no figure)
MAX_FIGURE = 1e18


def finite(v: object) -> bool:
    """A number the probe can use: int or float (not bool), finite and within MAX_FIGURE
    (math.isfinite of a huge int raises OverflowError; this never does)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, int):
        return -MAX_FIGURE <= v <= MAX_FIGURE
    return math.isfinite(v) and abs(v) <= MAX_FIGURE


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


# -- processes ----------------------------------------------------------------------------------
_SESSION = []  # type: list


def session_anchor() -> tuple[int, int, str | None] | None:
    """This probe's `procfs.session()`, found once: a resident probe keeps its session."""
    if not _SESSION:
        _SESSION.append(procfs.session())
    return _SESSION[0]


class Procs:
    """One look at /proc: argv of every process, minus the probe and its parent chain. Built
    from one walk of a `ProcTable` (the resident probe's, kept between polls, or a new one):
    every /proc/PID/stat read once, each command line only when it may have changed."""

    def __init__(
        self, scan: bool = True, table: ProcTable | None = None, fresh: bool = False
    ) -> None:
        """`scan=False`: no process at all (the probe's stand-in when /proc cannot be read),
        the probe itself still skipped; see `empty`. `table`: the ProcTable to walk (a new
        one, which reads every command line, when None); `fresh`: read every command line."""
        self.me = os.getpid()
        self.raw: dict[int, str] = {}
        self.prog: dict[int, str] = {}
        self._ours: dict[int, bool] = {}
        self.known: set[tuple[int, int]] = set()
        self._argv: dict[int, list[str]] = {}
        self._stat: dict[int, tuple[int, int, str] | None] = {}
        self._usage: dict[int, tuple[int, int, int, str] | None] = {}
        self.skip = {self.me}
        if not scan:
            return
        for pid, rec in (table or ProcTable()).walk(fresh).items():
            self._stat[pid], self._usage[pid] = rec[4], rec[5]
            if rec[1]:
                self.raw[pid], self.prog[pid] = rec[1], rec[3]
        pid = self.me
        while pid > 1:
            pid = self.ppid(pid) or 0
            self.skip.add(pid)

    @classmethod
    def empty(cls) -> Procs:
        """A look at /proc that found no process (the snapshot goes on without one)."""
        return cls(scan=False)

    def stat(self, pid: int) -> tuple[int, int, str] | None:
        """(ppid, start ticks, state) from /proc/PID/stat, or None when gone."""
        if pid not in self._stat:
            st = procfs.stat(pid)
            self._stat[pid] = (st[1], st[3], st[0]) if st else None
        return self._stat[pid]

    def usage(self, pid: int) -> tuple[int, int, int, str] | None:
        """(CPU ticks, resident pages, start ticks, state) of `pid` as this look read them
        (`procfs.usage` for a pid it did not see), or None when gone."""
        if pid not in self._usage:
            self._usage[pid] = procfs.usage(pid)
        return self._usage[pid]

    def ppid(self, pid: int) -> int | None:
        st = self.stat(pid)
        return st[0] if st else None

    def uid(self, pid: int) -> int | None:
        try:
            return os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return None

    def argv(self, pid: int) -> list[str]:
        """The argv of `pid` (empty when unknown)."""
        if pid not in self._argv:
            raw = self.raw.get(pid, "")
            self._argv[pid] = (raw[:-1] if raw.endswith("\0") else raw).split("\0") if raw else []
        return self._argv[pid]

    def know(self, ids: object) -> None:
        """The controller's own helpers by (pid, start ticks) as its session saw them (a mirror's
        helpers on a connection of their own): ours too. Anything else in `ids` is ignored."""
        for x in ids if isinstance(ids, list) else ():
            if (
                isinstance(x, list)
                and len(x) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
            ):
                self.known.add((x[0], x[1]))

    def _up(self, pid: int) -> tuple[int, int] | None:
        st = self.stat(pid)
        return (st[0], st[1]) if st else None

    def ours(self, pid: int) -> bool:
        """True for fleetdeck's own processes: this probe, its parent chain, every process that
        descends from the controller's session on this host (`procfs.session`: the sshd process
        of its connection, or the local controller, by pid and start time), and the helpers the
        controller named by pid and start time. Never by an environment variable or a name, so a
        process that copies every marker it can read is still listed, flagged and stoppable."""
        if pid in self.skip:
            return True
        if pid not in self._ours:
            st = self.stat(pid)
            self._ours[pid] = st is not None and (
                (pid, st[1]) in self.known or procfs.in_session(pid, session_anchor(), self._up)
            )
        return self._ours[pid]

    def others(self) -> list[int]:
        """Every pid that is not the probe or one of its ancestors."""
        return [p for p in self.raw if p not in self.skip]

    def alive(self, pid: object, start: int | None = None) -> bool:
        st = self.stat(pid) if isinstance(pid, int) and pid > 0 else None
        return st is not None and st[2] not in "ZX" and (start is None or st[1] == start)

    def command(self, pid: int) -> str:
        return " ".join(self.argv(pid))[:300]


def meminfo(keys: Container[str] | None = None) -> dict[str, int]:
    """/proc/meminfo in bytes: {name: bytes}, only the names in `keys` when given."""
    info = {}
    for line in procfs.read_bytes("/proc/meminfo").decode("ascii", "replace").splitlines():
        k, _, v = line.partition(":")
        if keys is not None and k not in keys:
            continue
        parts = v.split()
        if parts and parts[0].isdigit():
            info[k] = int(parts[0]) * 1024
    return info


def guard(warnings: list[str], name: str, fn: Callable[[], Any], default: Any) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a section that breaks becomes a warning, not a crash
        warnings.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        return default
