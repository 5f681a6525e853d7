"""Process facts from /proc, and the one rule of process identity: (pid, start time).

A pid alone names nothing: it is reused. Everything that records a process to act on it later
(a run's trainer, a loop to stop, a holder of a file) records the pid with its start time in
clock ticks since boot, and `same_process` is the only check of "is it still that process".
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Callable

from fleetdeck.backend.host.lib import flags

# Set in the environment of every helper fleetdeck starts on a host (the boot line sets it) so
# that the trainer a launch starts can drop it. It is NOT how fleetdeck knows its own processes:
# any user can set an environment variable. That is `session()` and `in_session()`: a process
# is fleetdeck's own when it descends from the session the controller opened (the sshd process
# of its connection, or the local controller itself, by pid and start time), or when the
# controller names it by pid and start time as its own session saw them.
HELPER_ENV = "FLEETDECK_HELPER"
# `--fleetdeck-session=PID:START` on a helper's argv: the local controller's own identity (for
# the `local` host, where no sshd stands between the controller and its helpers)
SESSION_ARG = "--fleetdeck-session="
# the per-connection OpenSSH process (`sshd: user@notty`; `sshd-session` from OpenSSH 9.8)
SSHD_COMMS = ("sshd", "sshd-session")
PF_KTHREAD = 0x00200000
#: the shells, by program name: a loop is one of them repeating; one at a prompt is interactive
SHELLS = frozenset(("bash", "sh", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh", "busybox"))


def read_bytes(path: str, limit: int = 1 << 20) -> bytes:
    """A /proc file's bytes with raw os calls (a process scan opens hundreds a poll)."""
    fd = os.open(path, flags.READ)
    try:
        chunks = []
        total = 0
        while total < limit:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
            total += len(b)
    finally:
        os.close(fd)
    return b"".join(chunks)


# /proc/PID/stat, by index into `stat_fields` (field N of proc(5) is index N - 3)
_STATE, _PPID, _PGRP, _TTY_NR, _FLAGS = 0, 1, 2, 4, 6
_UTIME, _STIME, _STARTTIME, _RSS = 11, 12, 19, 21


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (`state` first), as bytes, or None
    when `pid` is gone. The name is skipped up to its last ')': it may hold spaces and ')'."""
    try:
        return fields_of_stat(read_bytes("/proc/%d/stat" % pid))
    except (OSError, ValueError):
        return None


def fields_of_stat(data: bytes) -> list[bytes]:
    """The fields of a /proc/PID/stat text `data` (bytes) after the command name, `state`
    first. ValueError when it holds no ')'."""
    return data[data.rindex(b")") + 2 :].split()


def start_ticks_of_stat(data: bytes) -> int | None:
    """The start time (clock ticks after boot) in a /proc/PID/stat text `data` (bytes), or None
    when it holds none: what tells a process from a later one with its pid."""
    try:
        return int(fields_of_stat(data)[_STARTTIME])
    except (ValueError, IndexError):
        return None


def facts_of_stat(data: bytes) -> tuple[bytes, str, int, int, int, int, int, int, int] | None:
    """(comm bytes, state, ppid, pgid, start ticks, flags, tty_nr, CPU ticks in user and system
    mode, resident pages) of a /proc/PID/stat text `data` (bytes), or None when it is not one:
    what one read of the file tells a process scan. The name is what lies between the first
    '(' and the last ')'."""
    try:
        f = fields_of_stat(data)
        return (
            data[data.index(b"(") + 1 : data.rindex(b")")],
            f[_STATE].decode("ascii", "replace"),
            int(f[_PPID]),
            int(f[_PGRP]),
            int(f[_STARTTIME]),
            int(f[_FLAGS]),
            int(f[_TTY_NR]),
            int(f[_UTIME]) + int(f[_STIME]),
            int(f[_RSS]),
        )
    except (ValueError, IndexError):
        return None


def stat(pid: int) -> tuple[str, int, int, int, int, int] | None:
    """(state, ppid, pgid, start ticks, flags, tty_nr) of `pid` from /proc/PID/stat, or None
    if gone."""
    f = stat_fields(pid)
    if f is None:  # gone
        return None
    try:
        return (
            f[_STATE].decode(),
            int(f[_PPID]),
            int(f[_PGRP]),
            int(f[_STARTTIME]),
            int(f[_FLAGS]),
            int(f[_TTY_NR]),
        )
    except (TypeError, ValueError, IndexError):
        return None


def usage(pid: int) -> tuple[int, int, int, str] | None:
    """(CPU ticks spent in user and system mode, resident pages, start ticks, state letter) of
    `pid` from /proc/PID/stat, or None if gone."""
    f = stat_fields(pid)
    if f is None:  # gone
        return None
    try:
        return (
            int(f[_UTIME]) + int(f[_STIME]),
            int(f[_RSS]),
            int(f[_STARTTIME]),
            f[_STATE].decode("ascii", "replace"),
        )
    except (TypeError, ValueError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot, or None when it is gone."""
    st = stat(pid)
    return st[3] if st else None


def alive(pid: object) -> bool:
    """True when `pid` exists and is not a zombie."""
    st = stat(pid) if isinstance(pid, int) and pid > 0 else None
    return st is not None and st[0] not in ("Z", "X")


def same_process(pid: object, start: object) -> bool:
    """True only when `pid` is alive and started at `start` ticks. Without a start time there
    is no identity: a bare pid is never taken as proof that a process still runs."""
    if not isinstance(pid, int) or pid <= 0 or not isinstance(start, int):
        return False
    st = stat(pid)
    return st is not None and st[0] not in ("Z", "X") and st[3] == start


def ppid(pid: int) -> int | None:
    """The parent pid of `pid`, or None."""
    st = stat(pid)
    return st[1] if st else None


def session(argv: list[str] | None = None) -> tuple[int, int, str | None] | None:
    """(pid, start ticks) of the process whose descendants are this controller's session on this
    host, or None: the local controller named on argv (`SESSION_ARG`, checked to be alive and an
    ancestor), else the nearest ancestor of this process that is an sshd (the per-connection
    process of the SSH connection the controller opened; the listener is further up, and a
    user's own login is another connection). Nothing here can be set by another process."""
    mine = ancestors()
    for a in sys.argv if argv is None else argv:
        if isinstance(a, str) and a.startswith(SESSION_ARG):
            try:
                pid, start = [int(x) for x in a[len(SESSION_ARG) :].split(":")]
            except ValueError:
                return None
            ok = pid in mine and same_process(pid, start)
            return (pid, start, a) if ok else None
    for pid in mine:
        if pid > 1 and comm(pid) in SSHD_COMMS:
            ticks = start_ticks(pid)
            return (pid, ticks, None) if ticks is not None else None
    return None


def in_session(
    pid: object,
    anchor: tuple[int, int, str | None] | None,
    stat_of: Callable[[int], tuple[int, int] | None] | None = None,
    hops: int = 64,
) -> bool:
    """True when `pid` descends from `anchor` ((pid, start ticks, session arg), from
    `session()`): its parent chain reaches that very process. For the local controller (which
    has other children: a test runner's, a shell's) the chain must pass through a child of it
    that carries the session arg on its argv, a helper it started itself; no other process can
    be the controller's child. `stat_of(pid)` -> (ppid, start) or None (a cache)."""
    if not anchor or not isinstance(pid, int) or pid <= 1:
        return False
    if stat_of is None:

        def stat_of(p: int) -> tuple[int, int] | None:
            st = stat(p)
            return (st[1], st[3]) if st else None

    cur = stat_of(pid)
    child = pid
    for _ in range(hops):
        if cur is None or cur[0] <= 1:
            return False
        parent = cur[0]
        up = stat_of(parent)
        if up is None:
            return False
        if parent == anchor[0]:
            if up[1] != anchor[1]:
                return False
            if len(anchor) > 2 and anchor[2]:
                return _has_arg(child, anchor[2])
            return True
        child = parent
        cur = up
    return False


def _has_arg(pid: int, arg: str) -> bool:
    """True when `arg` is one of `pid`'s argv entries."""
    try:
        raw = read_bytes("/proc/%d/cmdline" % pid)
    except OSError:
        return False
    return arg.encode() in raw.split(b"\0")


def session_argv() -> list[str]:
    """[SESSION_ARG + "PID:START"] naming this process, for a helper it starts itself."""
    start = start_ticks(os.getpid())
    return [] if start is None else ["%s%d:%d" % (SESSION_ARG, os.getpid(), start)]


def ancestors(pid: int | None = None) -> list[int]:
    """The pids `pid` (default: this process) descends from, nearest first, init included."""
    out = []  # type: list
    cur = os.getpid() if pid is None else pid
    while True:
        parent = ppid(cur)
        if not parent or parent in out:
            return out
        out.append(parent)
        cur = parent


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc/PID/task/*/children where the kernel has it)."""
    kids = []  # type: list
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return kids
    for t in tasks:
        try:
            kids.extend(int(x) for x in read_bytes("/proc/%d/task/%s/children" % (pid, t)).split())
        except (OSError, ValueError):
            pass
    return kids


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, breadth first."""
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop(0)):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def is_kernel_thread(pid: int) -> bool:
    """Kernel threads hold no user files; unprivileged users cannot read their entries."""
    st = stat(pid)
    return bool(st and st[4] & PF_KTHREAD)


def cmdline(pid: int) -> list[str]:
    """argv of `pid` as a list of str (undecodable bytes kept), [] when unknown."""
    try:
        raw = read_bytes("/proc/%d/cmdline" % pid)
    except OSError:
        return []
    if not raw:
        return []
    return [a.decode("utf-8", "surrogateescape") for a in raw.rstrip(b"\0").split(b"\0")]


def comm(pid: int) -> str:
    """The short name of `pid`, or '?'."""
    try:
        return read_bytes("/proc/%d/comm" % pid).decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def uid(pid: int) -> int | None:
    """The owner uid of `pid`, or None."""
    try:
        return os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None


def has_helper_marker(pid: int) -> bool:
    """True when `pid`'s environment holds HELPER_ENV. Anyone can set it: a hint (a partial
    folder's writer of the same pid and start time), never proof that a process is ours.
    Another user's process is unreadable here and counts as not marked."""
    try:
        env = read_bytes("/proc/%d/environ" % pid)
    except OSError:
        return False
    return (HELPER_ENV + "=1").encode() in env.split(b"\0")


def pids() -> list[int]:
    """Every pid in /proc now."""
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def clock_ticks() -> int:
    """Clock ticks per second (for start times)."""
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


def boot_time() -> int:
    """Epoch seconds of the last boot, from /proc/stat."""
    try:
        for line in read_bytes("/proc/stat").splitlines():
            if line.startswith(b"btime "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def started_at(start: float) -> float:
    """Epoch seconds at which a process that started at `start` ticks began."""
    return boot_time() + start / float(clock_ticks())


def signal_process(pid: int, start: int | None, sig: int) -> bool:
    """Send `sig` to the process (pid, start) only, never to whoever reused its pid: through a
    pidfd where the kernel has them (it pins the process while its start time is checked).
    False when that process is gone."""
    fd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            fd = os.pidfd_open(pid)  # novm: guarded by hasattr above
        except ProcessLookupError:
            return False
        except OSError as e:
            if e.errno not in (errno.ENOSYS, errno.EPERM):  # kernels before 5.3, seccomp filters
                raise
    if fd is not None:
        try:
            if not same_process(pid, start):
                return False
            signal.pidfd_send_signal(fd, sig)  # novm: guarded by hasattr above
        except ProcessLookupError:
            return False
        finally:
            os.close(fd)
        return True
    if not same_process(pid, start):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(procs: list[tuple[int, int]], seconds: float) -> bool:
    """True once none of [(pid, start)] is the same process any more, within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        if not any(same_process(p, t) for p, t in procs):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
