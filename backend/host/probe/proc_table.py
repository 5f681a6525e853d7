"""One walk of /proc a poll, and what a resident probe keeps of each process between polls.

Every poll reads each `/proc/PID/stat` once (the figures that move: CPU ticks, resident pages,
state, parent) and shares that one walk between the process list, the schedules' loops and the
seats. A process's command line is read again only when something in its stat says it may have
changed: a process is known by (pid, start ticks), so a reused pid is a new process and read
afresh; its command name (`exec` changes it), its CPU ticks (a process that rewrote its argv
ran to do it) or its state changed. A stat byte for byte the same as the last poll's is not
even parsed again. Every FULL_EVERY walks, and on a `fresh` request,
every command line is read again whatever its stat says, so nothing kept can outlive a change
the stat did not show. A process gone from /proc is forgotten at the walk that misses it.
"""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import os

from fleetdeck.backend.host.lib import flags, procfs

#: every this many walks each command line is read again, whether its stat moved or not
FULL_EVERY = 10
#: bytes of /proc/PID/stat read in one call: 52 fields of at most 20 digits and a 64-byte name
STAT_BYTES = 4096


class ProcTable:
    """The processes as the last walk saw them: {pid: (stat, raw command line, stat bytes,
    program name, (ppid, start ticks, state), (CPU ticks, resident pages, start ticks,
    state))}, where stat is `procfs.facts_of_stat`'s tuple, the raw command line a str (NULs
    kept; "" for a kernel thread, a zombie, or a process whose command line could not be read)
    and the program name its argv[0]'s last part (a login shell's "-" dropped). A record whose
    stat did not move is the very tuple of the walk before."""

    def __init__(self) -> None:
        self.recs: dict[int, tuple] = {}
        self.walks = 0

    def walk(self, fresh: bool = False) -> dict[int, tuple]:
        """Read every /proc/PID/stat, and the command lines that may have changed (see the
        module docstring). Returns `recs`, replaced, never updated in place."""
        full = fresh or self.walks % FULL_EVERY == 0
        self.walks += 1
        old, new = self.recs, {}  # type: dict[int, tuple], dict[int, tuple]
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                fd = os.open("/proc/" + name + "/stat", flags.READ)
            except OSError:
                continue
            try:
                data = os.read(fd, STAT_BYTES)
            except OSError:
                continue
            finally:
                os.close(fd)
            prev = None if full else old.get(pid)
            if prev is not None and prev[2] == data:  # not one figure moved: nothing to parse
                new[pid] = prev
                continue
            st = procfs.facts_of_stat(data)
            if st is None:
                continue
            if prev is not None and _same(prev[0], st):
                raw, prog = prev[1], prev[3]
            elif st[5] & procfs.PF_KTHREAD or st[1] in ("Z", "X"):
                raw = prog = ""  # the kernel gives neither a command line
            else:
                try:
                    raw = procfs.read_bytes("/proc/" + name + "/cmdline").decode(
                        "utf-8", "surrogateescape"
                    )
                except OSError:
                    raw = ""
                prog = raw.partition("\0")[0].rpartition("/")[2].lstrip("-")
            new[pid] = (st, raw, data, prog, (st[2], st[4], st[1]), (st[7], st[8], st[4], st[1]))
        self.recs = new
        return new


def _same(a: tuple, b: tuple) -> bool:
    """True when two stats of one pid say its command line cannot have changed: the same
    process (start ticks), the same name, the same CPU ticks and the same state."""
    return a[4] == b[4] and a[0] == b[0] and a[7] == b[7] and a[1] == b[1]
