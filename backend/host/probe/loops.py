"""The probe's shell loops: a shell that really repeats (a while / until / for / select loop
in its command or script, or a child started again and again), and `watch`."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

from fleetdeck.backend.host.lib import flags
from fleetdeck.backend.host.lib.text import fsdec, shown
from fleetdeck.backend.host.probe.common import SHELLS, Procs, user_name
from fleetdeck.backend.host.probe.entries import schedule_entry, schedule_id

# A shell is a loop only when it really repeats: its command or script holds a while / until /
# for / select loop, or it has been seen starting the same child again and again. A one-shot
# script that sleeps once, a cron job's `sh -c 'sleep 30; cmd'` and a shell at a prompt merely
# wait on a child; listing them as loops gave a new stray (and a new id) on every cron run.
# the keyword where a command starts: line start, after ; & | ( { or after do / then / else
_LOOP_WORD = re.compile(
    r"(?:^|[;&|(){}]|(?<![\w-])(?:do|then|else)\s)\s*(while|until|for|select)(?=[\s(])", re.M
)
_DO = re.compile(r"(?:^|[\s;&|(){}])do(?=[\s;&|(){}]|$)")
_COMMENT = re.compile(r"(?:^|(?<=\s))#.*$", re.M)
#: distinct instances of one child command a shell must be seen starting before it repeats
#: ("again and again": a script that runs `sleep 5` twice on its way is not a loop)
RESPAWNS = 3
#: child commands remembered per shell (a prompt runs many; memory stays bounded)
REMEMBERED = 16
#: bytes of a script file read to look for a loop in it
SCRIPT_LIMIT = 256 * 1024
# (shell pid, start ticks) -> {child argv: [(pid, start ticks), ...]}, kept across the polls of
# a resident probe (a one-shot probe sees one moment, so only the script text can say "loop")
_SPAWNED: dict = {}
_OPT_ARG = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}


def _shell_script(argv: Sequence[str]) -> tuple[str, str] | None:
    """(kind, text) of a shell's argv: ("c", the -c string), ("file", the script path), or
    None for a shell reading a terminal or stdin."""
    args = argv[2:] if argv and argv[0].rpartition("/")[2] == "busybox" else argv[1:]
    want_c, i = False, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in _OPT_ARG:
            i += 2
            continue
        if a.startswith(("-", "+")) and len(a) > 1:
            if not a.startswith("--") and "c" in a[1:]:
                want_c = True
            if not a.startswith("--") and "s" in a[1:]:
                return None  # -s: commands come from stdin
            i += 1
            continue
        break
    rest = args[i:]
    if not rest:
        return None
    return ("c" if want_c else "file", rest[0])


def _read_script(pid: int, path: str) -> str | None:
    """The text of the script file a shell runs (bounded), or None when it cannot be read. Only
    a regular file is read: a script fed through a pipe or a FIFO (`bash /dev/fd/3`, `bash
    <(...)`) is never opened for reading, which would block the probe or eat the shell's input.
    Paths are the shell's: relative to its cwd, /dev/fd/N and /proc/self/fd/N its descriptors."""
    m = re.match(r"^/(?:dev|proc/self)/fd/(\d+)$", path)
    if m:
        full = f"/proc/{pid}/fd/{m.group(1)}"
    else:
        full = path if path.startswith("/") else os.path.join(f"/proc/{pid}/cwd", path)
    try:
        if not stat.S_ISREG(os.stat(full).st_mode):
            return None
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | flags.CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else in between
            return None
        return fsdec(os.read(fd, SCRIPT_LIMIT))
    except OSError:
        return None
    finally:
        os.close(fd)


def loop_construct(text: str | None) -> str | None:
    """The loop keyword (`while`, `until`, `for`, `select`) a shell text repeats with, or None."""
    code = _COMMENT.sub("", text or "")
    m = _LOOP_WORD.search(code)
    return m.group(1) if m and _DO.search(code, m.end()) else None


def _unit(procs: Procs, pid: int) -> int:
    """The shell a process belongs to as a schedule: a subshell that is a fork of a shell with
    a script (the same argv) is part of that shell; a prompt's background job stands alone."""
    while True:
        parent = procs.ppid(pid)
        if (
            not parent
            or parent in procs.skip
            or procs.prog.get(parent) not in SHELLS
            or procs.argv(parent) != procs.argv(pid)
            or _shell_script(procs.argv(parent)) is None
        ):
            return pid
        pid = parent


def _respawned(procs: Procs, shells: dict[int, str]) -> dict[int, tuple[list[str], int]]:
    """Shells seen starting the same child again and again: {shell pid: (child argv, count)}.
    Updates the memory of what each shell was seen running; forgets shells that are gone."""
    for pid in procs.others():
        parent = procs.ppid(pid)
        if not parent or procs.prog.get(parent) not in SHELLS:
            continue
        unit = _unit(procs, parent)
        st, ust = procs.stat(pid), procs.stat(unit)
        if unit not in shells or st is None or ust is None:
            continue
        seen = _SPAWNED.setdefault((unit, ust[1]), {})
        key = tuple(procs.argv(pid))
        kids = seen.pop(key, [])  # re-inserted last: the oldest command is the one forgotten
        if (pid, st[1]) not in kids:
            kids = (kids + [(pid, st[1])])[-RESPAWNS:]
        seen[key] = kids
        while len(seen) > REMEMBERED:
            del seen[next(iter(seen))]
    for key in list(_SPAWNED):
        if not procs.alive(*key):
            del _SPAWNED[key]
    out = {}
    for (unit, _start), seen in _SPAWNED.items():
        if unit in shells and seen:
            argv, kids = max(seen.items(), key=lambda kv: len(kv[1]))
            out[unit] = (list(argv), len(kids))
    return out


def loops(procs: Procs) -> list[dict]:
    """Shell loops and `watch` found in /proc (never our own): see `loop_construct` and
    RESPAWNS. A loop's id is its shell's user, argv and start time, so it keeps its id while
    the children it starts come and go."""
    found = {}  # type: dict
    shells = {}  # type: dict[int, str]
    for pid in procs.others():
        prog = procs.prog[pid]
        if (prog not in SHELLS and prog != "watch") or procs.ours(pid):
            continue
        argv = procs.argv(pid)
        if prog == "watch":
            n = "2"
            for i, a in enumerate(argv[1:-1], 1):
                if a in ("-n", "--interval"):
                    n = argv[i + 1]
                elif a.startswith("--interval="):
                    n = a.split("=", 1)[1]
            found[pid] = (f"watch every {n}s", " ".join(argv[1:]))
            continue
        if _unit(procs, pid) != pid:
            continue  # a fork of a listed shell: its children count as that shell's
        script = _shell_script(argv)
        if script is None:
            text, command = None, " ".join(argv[1:])
        elif script[0] == "c":
            text = command = script[1]
        else:
            text, command = _read_script(pid, script[1]), " ".join(argv[1:])
        shells[pid] = command
        word = loop_construct(text)
        if word and text is not None:  # a loop word is only ever found in a text
            sl = re.search(r"\bsleep\s+([^\s;&|()]+)", text)
            found[pid] = (f"{word}-loop" + (f", sleep {sl.group(1)}" if sl else ""), command)
    for pid, (child, count) in _respawned(procs, shells).items():
        if pid not in found and count >= RESPAWNS:
            found[pid] = ("repeats {}".format(shown(" ".join(child))[:60]), shells[pid])
    out = []
    for pid, (spec, command) in sorted(found.items()):
        st = procs.stat(pid)
        uid = procs.uid(pid)
        if st is None or uid is None:
            continue
        user, argv = user_name(uid), procs.argv(pid)
        out.append(
            schedule_entry(
                "loop",
                user,
                spec,
                command,
                f"/proc/{pid}",
                schedule_id("l-", "loop", user, "\0".join(argv), st[1]),
                pid=pid,
                start_time=st[1],
            )
        )
    return out
