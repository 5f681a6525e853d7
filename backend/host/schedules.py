"""Host side of schedule removal: stdlib + the host library, Python 3.8+.

Run through `HostLink.run_helper("fleetdeck.backend.host.schedules", request)`.
Request: `{"op": "inspect" | "apply", "schedule": {...}, ...}`; the answer is the host
library's one shape (`serve`): the op's fields with `"ok": true`, or
`{"ok": false, "error": {"code", "message", ...}}`.

`inspect` checks that the entry is still what was listed and returns what the controller needs
before anything changes (the whole crontab / cron file for its backup, and its sha256; the
processes a loop stop will end); `apply` re-checks, writes the host-side backup, changes
exactly one thing, and verifies the result. Nothing here goes through a shell: every command
is an argv list, every string arrives as JSON on stdin.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import base64
import hashlib
import os
import re
import signal
import stat
import sys
import time

from fleetdeck.backend.host.lib import crontab, files, procfs, runner
from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.lib.text import fsenc, shown

SHELLS = ("bash", "sh", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh", "busybox")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.timer$")
ENV = dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")


def _run(argv, data=None, timeout=30, cwd=None):
    """(rc, stdout bytes, first line of stderr) of a fixed argv, in the C locale."""
    r = runner.run(argv, data=data, timeout=timeout, cwd=cwd, env=ENV)
    return r.rc, r.out, runner.first_line(r.err)


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _stamp():
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-%d" % os.getpid()


def _safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "_"


def _short(b, limit=120):
    """A crontab line, path or tool message as it may appear in a sentence: escaped, bounded."""
    s = shown(b if isinstance(b, (bytes, str)) else str(b))
    return s if len(s) <= limit else s[:limit] + "..."


# -- crontab and cron files: one line out of a file, every other byte kept ---------------------
def split_lines(data):
    """The lines of `data` with their own terminators: only b"\\n" ends a line (a CR, a form
    feed or any other byte is part of its line), and an unterminated last line stays so."""
    if not data:
        return []
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def without_line(data, line, raw, what):
    """`data` minus line `line` (1-based), after checking that line still reads exactly `raw`
    (str from the listing, surrogateescape for undecodable bytes). Every other byte is kept."""
    if not isinstance(line, int) or isinstance(line, bool) or not isinstance(raw, str):
        raise Refused("unsupported", "the listing gave no line number and text for this entry")
    lines = split_lines(data)
    want = fsenc(raw)
    if not 1 <= line <= len(lines):
        raise Refused("changed-since-listing", "%s now has %d lines, so line %d is gone" % (what, len(lines), line))
    got = lines[line - 1]
    if got.endswith(b"\n"):
        got = got[:-1]
    if got != want:
        raise Refused("changed-since-listing", "line %d of %s now reads %s, not the listed %s"
                      % (line, what, _short(got), _short(want)))
    return b"".join(lines[:line - 1] + lines[line:])


def _crontab_argv(user):
    # -u only for someone else (it needs root); the probe lists one's own crontab the same way
    return ["crontab"] if not user or user == crontab.me() else ["crontab", "-u", user]


def _read_crontab(user):
    """The crontab's exact bytes (the host library's one way to read them)."""
    try:
        return crontab.read(user or None)
    except Refused as e:
        if e.code == "crontab-unreadable":
            e.message += "; refusing to edit a crontab that cannot be read"
        raise


def _backup_dir(req):
    d = req.get("backup_dir")
    if not d:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        d = os.path.join(base, "fleetdeck", "backups")
    d = os.path.expanduser(d)
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _write_new(path, data, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        files.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path):
    try:
        return files.read_regular(path)
    except files.NotRegular:
        raise Refused("unsupported", "%s is not a regular file" % _short(path)) from None


def _cron_file_path(sched):
    path = sched.get("source") or ""
    if not path.startswith("/") or "\n" in path:
        raise Refused("unsupported", "cron file %s is not an absolute path" % _short(path))
    return path


def _current(s):
    """(bytes now, what, backup name) of a crontab or cron file entry's whole file."""
    if s["kind"] == "crontab":
        who = s.get("user") or crontab.me()
        return (_read_crontab(s.get("user")), "the crontab of %s" % _short(who),
                "crontab-%s-%s" % (_safe(who), _stamp()))
    path = _cron_file_path(s)
    try:
        data = _read_file(path)[0]
    except FileNotFoundError:
        raise Refused("not-found", "cron file %s no longer exists" % _short(path)) from None
    except OSError as e:
        raise Refused("unsupported", "cannot read cron file %s safely: %s" % (_short(path), e.strerror)) from None
    return data, _short(path), "cron-file-%s-%s" % (_safe(os.path.basename(path)), _stamp())


def inspect_lines(req):
    """Check a crontab / cron-file entry; return the whole file for the controller's backup."""
    s = req["schedule"]
    data, what, name = _current(s)
    new = without_line(data, s.get("line"), s.get("raw"), what)
    return {"original_b64": base64.b64encode(data).decode(), "sha256": _sha(data),
            "new_sha256": _sha(new), "backup_name": name, "what": what}


def apply_lines(req):
    """Remove the entry: re-check, back up on the host, install the edited file, verify."""
    s = req["schedule"]
    data, what, name = _current(s)
    if _sha(data) != req.get("sha256"):
        raise Refused("changed-since-listing", "%s changed after it was checked; nothing edited" % what)
    new = without_line(data, s.get("line"), s.get("raw"), what)
    bdir = _backup_dir(req)
    backup = os.path.join(bdir, os.path.basename(req.get("backup_name") or name))
    _write_new(backup, data)
    try:
        if s["kind"] == "crontab":
            _install_crontab(s.get("user"), new, bdir, data)
            after = _read_crontab(s.get("user"))
        else:
            path = _cron_file_path(s)
            _rewrite_file(path, new, data)
            after = _read_file(path)[0]
    except Refused as e:
        e.extra["host_backup"] = backup
        raise
    if after != new:
        raise Refused("verify-failed", "%s does not read back byte for byte as edited (backup kept at %s)"
                      % (what, _short(backup)), host_backup=backup)
    return {"host_backup": backup, "sha256_after": _sha(after),
            "message": "removed line %d of %s; backup at %s" % (s["line"], what, _short(backup))}


def _install_crontab(user, new, bdir, original):
    name = ".crontab-new-%s" % _stamp()
    tmp = os.path.join(bdir, name)
    _write_new(tmp, new)
    try:
        # last look: between reading and installing, someone may have run crontab -e
        if _read_crontab(user) != original:
            raise Refused("changed-since-listing", "the crontab changed while it was being edited")
        # relative to cwd: vixie crontab truncates file names at 100 bytes (MAX_FNAME)
        rc, _, err = _run(_crontab_argv(user) + ["./" + name], cwd=bdir)
        if rc != 0:
            raise Refused("install-failed", "crontab refused the edited file: %s" % (_short(err) or rc))
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _rewrite_file(path, new, original):
    data, st = _read_file(path)
    if data != original:
        raise Refused("changed-since-listing", "%s changed while it was being edited" % _short(path))
    d, base = os.path.split(path)
    # a dotted name: cron (run-parts rules) never runs a half-written temp file in /etc/cron.d
    tmp = os.path.join(d, ".%s.fleetdeck-%d.tmp" % (base, os.getpid()))
    made = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        made = True
        try:
            files.write_all(fd, new)
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, st.st_uid, st.st_gid)
            os.fsync(fd)
        finally:
            os.close(fd)
        cur = os.lstat(path)
        if (cur.st_dev, cur.st_ino) != (st.st_dev, st.st_ino):
            raise Refused("changed-since-listing", "%s was replaced while it was being edited" % _short(path))
        os.replace(tmp, path)
    except PermissionError as e:
        raise Refused("permission-denied", "cannot rewrite %s: %s" % (_short(path), e.strerror)) from None
    finally:
        if made and os.path.lexists(tmp):
            os.unlink(tmp)
    dfd = os.open(d or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# -- systemd timers -----------------------------------------------------------------------
def _systemctl(s):
    argv = ["systemctl"]
    if s.get("scope") == "user":
        argv.append("--user")
        if s.get("user") and s.get("user") != crontab.me():
            argv += ["--machine", "%s@" % s["user"]]
    return argv


def _timer_state(s):
    unit = s.get("unit") or ""
    if not UNIT_RE.match(unit) or unit.startswith("-"):
        raise Refused("unsupported", "%s is not a timer unit name" % _short(unit))
    rc, out, err = _run(_systemctl(s) + ["show", "-p", "LoadState", "-p", "ActiveState",
                                         "-p", "UnitFileState", "--", unit])
    if rc != 0:
        raise Refused("command-failed", "systemctl show %s failed: %s" % (unit, _short(err) or rc))
    props = dict(x.split("=", 1) for x in out.decode("utf-8", "replace").splitlines() if "=" in x)
    if props.get("LoadState") != "loaded":
        raise Refused("not-found", "timer %s is no longer loaded (%s)" % (unit, props.get("LoadState", "?")))
    return unit, props


def inspect_timer(req):
    unit, props = _timer_state(req["schedule"])
    return {"state": props, "what": unit}


def apply_timer(req):
    s = req["schedule"]
    unit, props = _timer_state(s)
    how = ["disable", "--now"]
    if props.get("UnitFileState") == "enabled-runtime":
        how = ["disable", "--runtime", "--now"]
    note = ""
    if props.get("UnitFileState") in ("static", "transient", "runtime", "generated"):
        # such units cannot be disabled; stopping is all there is
        how = ["stop"]
        note = " (its unit file is %s: it cannot be disabled)" % props["UnitFileState"]
    rc, _, err = _run(_systemctl(s) + how + ["--", unit])
    if rc != 0:
        raise Refused("command-failed", "systemctl %s %s failed: %s" % (" ".join(how), unit, _short(err) or rc))
    try:
        _, after = _timer_state(s)
    except Refused as e:
        if e.code != "not-found":
            raise
        after = {"LoadState": "not-found"}  # a stopped transient timer is unloaded: gone is done
    # enabled-runtime counts: it starts again at the next boot of this manager just the same
    if after.get("ActiveState") == "active" or (after.get("UnitFileState") or "").startswith("enabled"):
        raise Refused("verify-failed", "timer %s is still %s/%s after %s" % (
            unit, after.get("ActiveState"), after.get("UnitFileState"), " ".join(how)))
    done = "stopped" if how == ["stop"] else "stopped and disabled"
    return {"state": after, "message": "timer %s %s%s" % (unit, done, note)}


# -- at jobs --------------------------------------------------------------------------------
def _at_job(s):
    job = str(s.get("job") or "")
    if not job.isdigit():
        raise Refused("unsupported", "%s is not an at job number" % _short(job))
    rc, out, err = _run(["at", "-c", job])
    if rc != 0:
        raise Refused("not-found", "at job %s no longer exists" % job)
    want = (s.get("command") or "").strip()
    if not want or fsenc(want) not in out:
        raise Refused("changed-since-listing", "at job %s no longer runs the listed command" % job)
    return job, out


def inspect_at(req):
    job, out = _at_job(req["schedule"])
    return {"sha256": _sha(out), "what": "at job %s" % job}


def apply_at(req):
    job, out = _at_job(req["schedule"])
    if _sha(out) != req.get("sha256"):
        raise Refused("changed-since-listing", "at job %s changed after it was checked" % job)
    rc, _, err = _run(["atrm", job])
    if rc != 0:
        raise Refused("command-failed", "atrm %s failed: %s" % (job, _short(err) or rc))
    if _run(["at", "-c", job])[0] == 0:
        raise Refused("verify-failed", "at job %s still exists after atrm" % job)
    return {"message": "at job %s removed" % job}


# -- loops: a process (and what it started) verified by start time ------------------------------
def _loop_target(s):
    pid, start = s.get("pid"), s.get("start_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(start, int) or pid <= 1:
        raise Refused("unsupported", "the listing gave no pid and start time for this loop")
    st = procfs.stat(pid)
    if st is None or st[0] in ("Z", "X"):
        raise Refused("not-found", "process %d has already exited" % pid)
    if not procfs.same_process(pid, start):
        raise Refused("changed-since-listing", "pid %d now belongs to another process (start time %d, listed %d)"
                      % (pid, st[3], start))
    if pid == os.getpid() or pid in procfs.ancestors():
        raise Refused("unsupported", "process %d is this helper or one of its parents" % pid)
    return pid, start


def _tty_nr(pid):
    st = procfs.stat(pid)
    return st[5] if st else 0


def _interactive(pid):
    argv = procfs.cmdline(pid)
    try:
        fd0 = os.readlink("/proc/%d/fd/0" % pid)
    except OSError:
        fd0 = ""
    prog = os.path.basename(argv[0]).lstrip("-") if argv else ""
    login = bool(argv) and argv[0].startswith("-")
    on_tty = _tty_nr(pid) != 0 and (fd0.startswith("/dev/pts/") or fd0.startswith("/dev/tty"))
    shell = prog in SHELLS and "-c" not in argv[1:]
    return {"interactive": bool(login or (shell and on_tty)), "tty": fd0 if on_tty else None,
            "argv": argv[:20]}


def loop_family(pid, group=None):
    """[(pid, start ticks)] of what stopping loop `pid` ends: its descendants, and the members
    of process group `group` (the loop's own, when it leads one: a child orphaned by an
    earlier iteration stays in it). Never this helper or its parents."""
    mine = set(procfs.ancestors()) | {os.getpid()}
    found = [p for p in procfs.descendants(pid) if p not in mine]
    if group:
        for p in procfs.pids():
            if p != pid and p not in found and p not in mine:
                ps = procfs.stat(p)
                if ps is not None and ps[2] == group:
                    found.append(p)
    out = []
    for p in found:
        t = procfs.start_ticks(p)
        if t is not None and procfs.alive(p):
            out.append((p, t))
    return out


def _group_of(pid):
    """The loop's process group when it leads one (and it is not this helper's), else None."""
    st = procfs.stat(pid)
    return pid if st is not None and st[2] == pid and os.getpgrp() != pid else None


def _family_json(family):
    return [{"pid": p, "start_time": t, "command": _short(" ".join(procfs.cmdline(p)) or procfs.comm(p), 200)}
            for p, t in family]


def inspect_loop(req):
    pid, start = _loop_target(req["schedule"])
    info = _interactive(pid)
    info.update(what="process %d" % pid, children=_family_json(loop_family(pid, _group_of(pid))))
    return info


_signal = procfs.signal_process
_wait_gone = procfs.wait_gone


def _freeze(pid, start, group, frozen):
    """SIGSTOP the loop, then everything below it (and in its group), until nothing new
    appears: a stopped process starts no child, so the family cannot grow while it is
    signalled. Adds to `frozen` ([(pid, start)], the loop first)."""
    if (pid, start) not in frozen and _signal(pid, start, signal.SIGSTOP):
        frozen.append((pid, start))
    for _ in range(50):
        new = [f for f in loop_family(pid, group) if f not in frozen]
        if not new:
            return frozen
        for p, t in new:
            if _signal(p, t, signal.SIGSTOP):
                frozen.append((p, t))
    return frozen


def _send(procs, sig):
    return any([_signal(p, t, sig) for p, t in procs])


def apply_loop(req):
    """Stop the loop and every process it started; done only when none of them is left."""
    pid, start = _loop_target(req["schedule"])
    info = _interactive(pid)
    grace = req.get("grace", 5.0)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 3600:
        raise Refused("bad-request", "grace must be a number of seconds from 0 to 3600, not %s" % _short(str(grace)))
    group = _group_of(pid)
    sent = []
    tried = []  # terminating signals attempted, even when one of them failed
    everyone = []
    try:
        _freeze(pid, start, group, everyone)
        if (pid, start) not in everyone:
            everyone.insert(0, (pid, start))
        tried.append("SIGTERM")
        if _send(everyone, signal.SIGTERM):
            sent.append("SIGTERM")
        _send(everyone, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
        if not _wait_gone(everyone, grace):
            _freeze(pid, start, group, everyone)  # what it started since, then no more
            tried.append("SIGKILL")
            if _send(everyone, signal.SIGKILL):
                sent.append("SIGKILL")
        # an orphan left in the loop's group (its parent gone) is still the loop's
        late = loop_family(pid, group) if group else []
        if late:
            everyone += [f for f in late if f not in everyone]
            if _send(late, signal.SIGKILL) and "SIGKILL" not in sent:
                sent.append("SIGKILL")
        if not _wait_gone(everyone, 10.0):
            left = [p for p, t in everyone if procfs.same_process(p, t)]
            raise Refused("still-running", "process %s survived SIGKILL" % ", ".join(map(str, left)),
                          survivors=left)
    except PermissionError:
        _send(everyone, signal.SIGCONT)
        if tried:
            # some of the family was already signalled: not a clean refusal
            raise Refused("partly-stopped", "not allowed to signal every process of loop %d after %s; "
                          "list the host again" % (pid, " then ".join(tried))) from None
        raise Refused("permission-denied", "not allowed to signal process %d or one of its children" % pid) from None
    family = [(p, t) for p, t in everyone if p != pid]
    how = " then ".join(sent) or "no signal (it had already exited)"
    msg = "process %d stopped with %s" % (pid, how)
    if family:
        msg += ", with the %d process%s it started (%s); none is left" % (
            len(family), "" if len(family) == 1 else "es", ", ".join(str(p) for p, _ in family))
    if info["interactive"]:
        msg += "; it was an interactive shell on %s, whose session has closed" % (info["tty"] or "a terminal")
    info.update(signals=sent, message=msg, children=[{"pid": p, "start_time": t} for p, t in family])
    return info


KINDS = {
    "crontab": (inspect_lines, apply_lines), "cron-file": (inspect_lines, apply_lines),
    "systemd-timer": (inspect_timer, apply_timer), "at": (inspect_at, apply_at),
    "loop": (inspect_loop, apply_loop),
}


def _by_kind(which):
    def op(req):
        s = req.get("schedule")
        kind = s.get("kind") if isinstance(s, dict) else None
        fns = KINDS.get(kind)
        if fns is None:
            raise Refused("unsupported", "cannot %s a schedule of kind %s" % (
                ("inspect", "apply")[which], _short(str(kind))))
        try:
            return fns[which](req)
        except OSError as e:
            raise Refused("command-failed", "%s: %s" % (e.strerror or e, _short(e.filename or ""))) from None
    return op


OPS = {"inspect": _by_kind(0), "apply": _by_kind(1)}

if __name__ == "__main__":
    sys.exit(serve(OPS))
