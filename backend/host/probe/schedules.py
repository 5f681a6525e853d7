"""The probe's schedules section: crontabs, cron files, systemd timers, at jobs, shell loops."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import time
from datetime import datetime, timedelta

from fleetdeck.backend.host.lib import crontab, packages, runner
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, shown
from fleetdeck.backend.host.probe.common import (
    _CACHE,
    CRON_D_NAME,
    CRON_RE,
    ENV_RE,
    SHELLS,
    SYSTEMD_BOOTED,
    TIMER_TTL,
    _cached,
    _finite,
    _guard,
    _iso,
    _me,
    _read,
    _run,
    _skey,
    _user,
)

# -- schedules ----------------------------------------------------------------------------------
#: hex digits of a schedule id after its kind letter and dash: 128 bits, so that nobody who can
#: write a crontab line or start a process on a host can make one whose id is another's
ID_HEX = 32
#: the id fleetdeck gave before ids were widened: kind letter, dash, 10 hex digits (40 bits of
#: sha1). A wide id starts with its legacy id, so an acknowledgement that holds the legacy form
#: still names the same schedule (`fleet/schedule_verdict.py` decides when it may be trusted).
LEGACY_HEX = 10


def _sid(prefix, *parts):
    """A schedule's id: `prefix` + the legacy 10 hex digits of sha1 + 22 of sha256 over `parts`."""
    data = "|".join(str(p) for p in parts).encode("utf-8", "surrogateescape")
    return (prefix + hashlib.sha1(data).hexdigest()[:LEGACY_HEX]
            + hashlib.sha256(data).hexdigest()[:ID_HEX - LEGACY_HEX])


_CRON_ALIAS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_CRON_NAMES = {n: i for i, n in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_CRON_NAMES.update({n: i for i, n in enumerate("sun mon tue wed thu fri sat".split())})


def _cron_field(text, lo, hi):
    vals = set()
    for part in text.lower().split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            a, b = lo, hi
        else:
            a, _, b = rng.partition("-")
            a = _CRON_NAMES.get(a) if a in _CRON_NAMES else int(a)
            b = (_CRON_NAMES.get(b) if b in _CRON_NAMES else int(b)) if b else (hi if step else a)
        vals.update(range(a, b + 1, int(step) if step else 1))
    return vals


def cron_next(spec, now=None):
    """The next time (ISO, host-local) a cron spec fires after `now`; None for @reboot or junk."""
    try:
        f = _CRON_ALIAS.get(spec, spec).split()
        if len(f) != 5:
            return None
        mins, hours, doms, mons = (_cron_field(f[0], 0, 59), _cron_field(f[1], 0, 23),
                                   _cron_field(f[2], 1, 31), _cron_field(f[3], 1, 12))
        dows = {d % 7 for d in _cron_field(f[4], 0, 7)}
    except (ValueError, TypeError):
        return None
    start = (now or datetime.now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for i in range(366 * 5):   # Feb 29 on a Monday can be years away
        d = start.date() + timedelta(days=i)
        if d.month not in mons:
            continue
        dm, dw = d.day in doms, d.isoweekday() % 7 in dows
        # cron's rule: with both day fields restricted, either one matching is enough
        if not ((dm or dw) if f[2][0] != "*" and f[4][0] != "*" else (dm and dw)):
            continue
        for h in sorted(hours):
            for m in sorted(mins):
                t = datetime(d.year, d.month, d.day, h, m)
                if t >= start:
                    return t.astimezone().isoformat(timespec="seconds")
    return None


def missing_paths(command, cron=False):
    """Absolute paths a command names that do not exist here (redirect targets excepted)."""
    if cron:   # cron turns the first unescaped % into a newline; what follows is stdin
        command = re.split(r"(?<!\\)%", command, maxsplit=1)[0].replace("\\%", "%")
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        toks = list(lex)
    except ValueError:
        toks = command.split()
    out, skip = [], False
    for i, t in enumerate(toks):
        if skip:
            skip = False
            continue
        if t and not t.strip("<>&|;()"):
            skip = ">" in t   # an output file need not exist before the job runs
            continue
        if i >= 2 and toks[i - 2] in ("test", "[", "[[") and re.match(r"^-[a-zA-Z]$", toks[i - 1]):
            continue   # `test -x /path || ...` checks for the path; its absence is expected
        if "=" in t and not t.startswith("/"):
            t = t.partition("=")[2]
        if (t.startswith("/") and not any(c in t for c in "*?[$`{~")
                and not t.startswith(("/dev/", "/proc/", "/sys/")) and not os.path.lexists(t)):
            out.append(t)
    return out


def _sched(kind, user, spec, command, source, sid, **kw):
    s = {"id": sid, "kind": kind, "user": user, "spec": spec, "command": command, "source": source,
         "next_run": None, "pid": None, "active": True, "start_time": None, "reasons": [], "raw": None,
         "line": None}
    s.update(kw)
    miss = missing_paths(command, cron=kind in ("crontab", "cron-file"))
    if miss:
        s["reasons"].append("dead-target")
        s["missing_paths"] = miss
    return s


def _cron_lines(text, kind, source, user, system, active=True, package=None):
    """Entries of a crontab or cron file. `text` holds the file's exact bytes (surrogateescape):
    only "\n" ends a line, so `raw` is the line byte for byte and a carriage return stays
    part of the command, as cron runs it. `package`: the file is the distribution's."""
    out, seen, bad = [], {}, []
    for n, raw in enumerate(text.split("\n"), 1):
        s = raw.strip(" \t")
        if not s.strip() or s.startswith("#") or ENV_RE.match(s):
            continue
        if s.startswith("@"):
            parts = s.split(None, 1)
            spec, rest = parts[0], parts[1] if len(parts) > 1 else ""
        else:
            m = CRON_RE.match(s)
            if not m:
                bad.append(n)
                continue
            spec, rest = " ".join(m.group(1, 2, 3, 4, 5)), m.group(6)
        u = user
        if system:
            parts = rest.split(None, 1)
            u, rest = (parts + [""])[:2] if parts else ("", "")
        if not rest:
            bad.append(n)
            continue
        key = (kind, u, source, spec, rest)
        seen[key] = seen.get(key, 0) + 1   # the same line twice in one file: two entries, two ids
        sid = _sid("c-", *key) if seen[key] == 1 else _sid("c-", *(key + (seen[key],)))
        e = _sched(kind, u, spec, rest, source, sid, raw=raw, line=n, active=active)
        e["next_run"] = cron_next(spec) if active else None
        if package:
            e.update(system=True, package=package)
        out.append(e)
    return out, bad


def _crontabs(fresh, warnings):
    """Every user's crontab, byte for byte (the host library's `crontab.read`): this user's, and
    when root can list the spool, everyone's. One user's crontab that cannot be read, or that
    belongs to no user any more, is a warning naming that user; the others are still listed."""
    if runner.which("crontab") is None:
        return []   # no cron here: nothing can be scheduled through it
    me = _me()
    users = [me]
    if os.geteuid() == 0:
        try:
            users += [n for n in crontab.spool_users() if n != me]
        except OSError as e:
            warnings.append(f"crontab spool: {shown(e.strerror or str(e))}")
    out = []
    for u in users:
        key = crontab.stat_key(u)   # changes whenever the crontab does
        hit = _CACHE.get(("crontab", u))
        if hit is not None and key is not None and hit[0] == key and not fresh:
            out += hit[1]
            continue
        try:
            data, problem = crontab.read_checked(u)
        except Refused as e:
            warnings.append(f"crontab of {shown(u)}: {e.message}")
            continue
        if problem is not None and problem.extra.get("source") == "spool":
            # listed as cron runs it; a removal refuses until the two reads agree again
            warnings.append(f"crontab of {shown(u)}: {problem.message}")
        entries = _cron_lines(fsdec(data), "crontab", "crontab -l", u, False)[0]
        _CACHE[("crontab", u)] = (key, entries)
        out += entries
    return out


def _cron_files(warnings):
    files = [("/etc/crontab", True)]
    try:
        files += [(os.path.join("/etc/cron.d", n), bool(CRON_D_NAME.match(n)))
                  for n in sorted(os.listdir("/etc/cron.d"))]
    except OSError:
        pass
    out = []
    for path, active in files:
        try:
            if not os.path.isfile(path):
                continue
            entries, bad = _cached("cron-file", path, lambda p, a=active: _cron_lines(
                _read(p), "cron-file", p, "", True, a, packages.installed_by(p)))
            out += entries
            if bad and active:
                warnings.append("{}: lines {} are not cron entries".format(path, ", ".join(map(str, bad[:5]))))
        except OSError as e:
            warnings.append(f"{path}: {e.strerror or e}")
    return out


def _show(base, units):
    """`systemctl show` of units: {Id: {property: value}} (key=value blocks, never the table)."""
    props = "Id,ActiveState,TimersCalendar,TimersMonotonic,NextElapseUSecRealtime,Unit,ExecStart,User,FragmentPath"
    rc, out, err = _run(base + ["show", "-p", props, "--"] + units)
    res = {}
    for block in out.split("\n\n"):
        d = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if d.get("Id"):
            res[d["Id"]] = d
    return res


def _timer_names(base, scope):
    rc, out, err = _run(base + ["list-timers", "--all", "--output=json", "--no-pager"])
    if rc != 0:   # no systemctl, or no manager to ask (a user without a running user manager)
        return None
    try:
        rows = json.loads(out)
        return {r["unit"]: r for r in rows if isinstance(r, dict) and r.get("unit")}
    except ValueError:
        pass   # systemd without JSON output: find the timer units on disk, ask `show` about them
    dirs = (["/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"]
            if scope == "system" else [os.path.expanduser("~/.config/systemd/user"), "/etc/systemd/user",
                                       "/usr/lib/systemd/user"])
    names = set()
    for d in dirs:
        for sub in ("", "timers.target.wants"):
            try:
                names |= {n for n in os.listdir(os.path.join(d, sub)) if n.endswith(".timer") and "@." not in n}
            except OSError:
                pass
    return {n: {} for n in sorted(names)}


def _timers(fresh):
    if not os.path.isdir(SYSTEMD_BOOTED):
        return []   # systemd is not PID 1 here: no timers can fire
    hit = _CACHE.get(("timers", ""))
    if hit is not None and not fresh and time.time() - hit[0] < TIMER_TTL:
        return hit[1]
    out = []
    for scope in ("system", "user"):
        base = ["systemctl"] + (["--user"] if scope == "user" else [])
        listed = _timer_names(base, scope)
        if not listed:
            continue
        info = _show(base, list(listed))
        services = {info.get(t, {}).get("Unit") or r.get("activates") for t, r in listed.items()}
        info.update(_show(base, sorted(s for s in services if s)))
        for t, row in listed.items():
            ti = info.get(t, {})
            svc = info.get(ti.get("Unit") or row.get("activates") or "", {})
            specs = re.findall(r"(On\w+)=([^;]+?)\s*;", ti.get("TimersCalendar", "") + ti.get("TimersMonotonic", ""))
            spec = ", ".join("{}={}".format(*kv) for kv in specs) or "?"
            m = re.search(r"argv\[\]=(.*?) ;", svc.get("ExecStart", ""))
            cmd = m.group(1) if m else (ti.get("Unit") or row.get("activates") or "")
            user = (svc.get("User") or "root") if scope == "system" else _me()
            nxt = row.get("next")
            nxt = _iso(nxt / 1e6) if _finite(nxt) and nxt > 0 else (ti.get("NextElapseUSecRealtime") or None)
            frag = ti.get("FragmentPath") or ""
            e = _sched("systemd-timer", user, spec, cmd, frag or "systemd",
                       _sid("t-", "systemd-timer", user, scope, t, spec, cmd), unit=t, scope=scope,
                       next_run=nxt, active=ti.get("ActiveState", "active") == "active")
            pkg = packages.installed_by(frag) if frag.startswith("/") else None
            if pkg:
                e.update(system=True, package=pkg)
            out.append(e)
    _CACHE[("timers", "")] = (time.time(), out)
    return out


def _at_jobs(fresh):
    key = None
    for d in ("/var/spool/cron/atjobs", "/var/spool/at"):
        try:
            key = _skey(os.stat(d))
            break
        except OSError:
            pass
    hit = _CACHE.get(("atq", ""))
    if hit is not None and key is not None and hit[0] == key and not fresh:
        return hit[1]
    rc, out, err = _run(["atq"])
    if rc is None:
        return []
    jobs = []
    for line in out.splitlines():
        job, _, rest = line.partition("\t")
        f = rest.split()
        if not job.strip().isdigit() or len(f) < 7:
            continue
        when, user = " ".join(f[:5]), f[6]
        ck = ("at-c", job.strip() + "|" + when)
        if ck not in _CACHE:
            _CACHE[ck] = (None, _at_command(job.strip()))
        cmd = _CACHE[ck][1]
        try:
            nxt = datetime.strptime(when, "%a %b %d %H:%M:%S %Y").astimezone().isoformat(timespec="seconds")
        except ValueError:
            nxt = when
        jobs.append(_sched("at", user, when, cmd, "atq", _sid("a-", "at", user, job.strip(), when, cmd),
                           job=job.strip(), next_run=nxt, raw=line))
    _CACHE[("atq", "")] = (key, jobs)
    return jobs


def _at_command(job):
    rc, out, err = _run(["at", "-c", job])
    lines = out.split("\n")
    for i, line in enumerate(lines):   # the job text sits in a here-document at the end
        m = re.search(r"<<\s*'(\w+)'\s*$", line)
        if m:
            body = lines[i + 1:]
            end = body.index(m.group(1)) if m.group(1) in body else len(body)
            return "\n".join(body[:end]).strip()
    for i, line in enumerate(lines):   # older at: the job text follows the `cd DIR || { ... }` block
        if line.startswith("cd ") and "}" in lines[i:]:
            return "\n".join(lines[lines.index("}", i) + 1:]).strip()
    return lines[-1].strip() if lines else ""


# -- loops ----------------------------------------------------------------------------------------
# A shell is a loop only when it really repeats: its command or script holds a while / until /
# for / select loop, or it has been seen starting the same child again and again. A one-shot
# script that sleeps once, a cron job's `sh -c 'sleep 30; cmd'` and a shell at a prompt merely
# wait on a child; listing them as loops gave a new stray (and a new id) on every cron run.
# the keyword where a command starts: line start, after ; & | ( { or after do / then / else
_LOOP_WORD = re.compile(r"(?:^|[;&|(){}]|(?<![\w-])(?:do|then|else)\s)\s*(while|until|for|select)(?=[\s(])", re.M)
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
_SPAWNED = {}
_OPT_ARG = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}


def _shell_script(argv):
    """(kind, text) of a shell's argv: ("c", the -c string), ("file", the script path), or
    (None, None) for a shell reading a terminal or stdin."""
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
                return None, None   # -s: commands come from stdin
            i += 1
            continue
        break
    rest = args[i:]
    if want_c:
        return ("c", rest[0]) if rest else (None, None)
    return ("file", rest[0]) if rest else (None, None)


def _read_script(pid, path):
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
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):   # swapped for something else in between
            return None
        return fsdec(os.read(fd, SCRIPT_LIMIT))
    except OSError:
        return None
    finally:
        os.close(fd)


def loop_construct(text):
    """The loop keyword (`while`, `until`, `for`, `select`) a shell text repeats with, or None."""
    code = _COMMENT.sub("", text or "")
    m = _LOOP_WORD.search(code)
    return m.group(1) if m and _DO.search(code, m.end()) else None


def _unit(procs, pid):
    """The shell a process belongs to as a schedule: a subshell that is a fork of a shell with
    a script (the same argv) is part of that shell; a prompt's background job stands alone."""
    while True:
        parent = procs.ppid(pid)
        if (not parent or parent in procs.skip or procs.prog.get(parent) not in SHELLS
                or procs.argv(parent) != procs.argv(pid) or _shell_script(procs.argv(parent))[0] is None):
            return pid
        pid = parent


def _respawned(procs, shells):
    """Shells seen starting the same child again and again: {shell pid: (child argv, count)}.
    Updates the memory of what each shell was seen running; forgets shells that are gone."""
    for pid in procs.others():
        parent = procs.ppid(pid)
        if procs.prog.get(parent) not in SHELLS:
            continue
        unit = _unit(procs, parent)
        st, ust = procs.stat(pid), procs.stat(unit)
        if unit not in shells or st is None or ust is None:
            continue
        seen = _SPAWNED.setdefault((unit, ust[1]), {})
        key = tuple(procs.argv(pid))
        kids = seen.pop(key, [])   # re-inserted last: the oldest command is the one forgotten
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


def loops(procs):
    """Shell loops and `watch` found in /proc (never our own): see `loop_construct` and
    RESPAWNS. A loop's id is its shell's user, argv and start time, so it keeps its id while
    the children it starts come and go."""
    found = {}
    shells = {}
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
            continue   # a fork of a listed shell: its children count as that shell's
        kind, arg = _shell_script(argv)
        text = arg if kind == "c" else _read_script(pid, arg) if kind == "file" else None
        command = arg if kind == "c" else " ".join(argv[1:])
        shells[pid] = command
        word = loop_construct(text)
        if word:
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
        user, argv = _user(uid), procs.argv(pid)
        out.append(_sched("loop", user, spec, command, f"/proc/{pid}",
                          _sid("l-", "loop", user, "\0".join(argv), st[1]), pid=pid, start_time=st[1]))
    return out


def schedules(req, procs, warnings):
    """Every schedule and loop on the host; each source guarded on its own."""
    fresh = bool(req.get("fresh"))
    out = []
    for name, fn in (("crontab", lambda: _crontabs(fresh, warnings)), ("cron files", lambda: _cron_files(warnings)),
                     ("systemd timers", lambda: _timers(fresh)), ("at jobs", lambda: _at_jobs(fresh)),
                     ("loops", lambda: loops(procs))):
        out += _guard(warnings, name, fn, [])
    return out
