"""Host side of schedule removal: stdlib only, Python 3.8+, fed through `HostLink.run_helper`.

Input (JSON on stdin): `{"op": "inspect" | "apply", "schedule": {...}, ...}`; output: one JSON
object with `ok`, `reason_code`, `message` and op-specific fields. `inspect` checks that the
entry is still what was listed and returns what the controller needs before anything changes
(the whole crontab / cron file for its backup, and its sha256); `apply` re-checks against that
sha256, writes the host-side backup, changes exactly one thing, and verifies the result.
Nothing here ever goes through a shell: every command is an argv list.
"""

import base64
import errno
import hashlib
import json
import os
import pwd
import re
import signal
import stat
import subprocess
import sys
import time

SHELLS = ("bash", "sh", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh", "busybox")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.timer$")


class Refused(Exception):
    """A check failed: (reason_code, sentence)."""

    def __init__(self, code, message, **extra):
        Exception.__init__(self, message)
        self.code = code
        self.message = message
        self.extra = extra


def _run(argv, data=None, timeout=30, cwd=None):
    env = dict(os.environ, LC_ALL="C", LANG="C")
    p = subprocess.run(argv, input=data, capture_output=True, stdin=None if data is not None else subprocess.DEVNULL,
                       env=env, timeout=timeout, cwd=cwd)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace").strip()


def _me():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _stamp():
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"


def _safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "_"


def _short(b, limit=120):
    s = b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)
    s = s.encode("unicode_escape").decode("ascii")
    return s if len(s) <= limit else s[:limit] + "..."


# -- crontab and cron files: one line out of a file ----------------------------------------
def _split(data):
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def _without_line(data, line, raw, what):
    """`data` minus line `line`, after checking that line still reads exactly `raw`."""
    if not isinstance(line, int) or isinstance(line, bool) or raw is None:
        raise Refused("unsupported", "the listing gave no line number and text for this entry")
    lines = _split(data)
    want = raw.encode("utf-8", "surrogateescape")
    if not 1 <= line <= len(lines):
        raise Refused("changed-since-listing", f"{what} now has {len(lines)} lines, so line {line} is gone")
    if lines[line - 1] != want:
        raise Refused("changed-since-listing", f"line {line} of {what} now reads {_short(lines[line - 1])}, not the listed {_short(want)}")
    del lines[line - 1]
    return b"".join(x + b"\n" for x in lines)


def _crontab_argv(user):
    # -u only for someone else (it needs root); the probe lists one's own crontab the same way
    return ["crontab"] if not user or user == _me() else ["crontab", "-u", user]


def _read_crontab(user):
    if user:
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise Refused("not-found", f"user {_short(user)} does not exist on this host") from None
    rc, out, err = _run(_crontab_argv(user) + ["-l"])
    if rc == 0:
        return out
    if "no crontab for" in err.lower():
        return b""
    # anything else (cron missing, permission, I/O): never treat it as an empty crontab
    why = _short(err) or f"exit status {rc}"
    raise Refused("crontab-unreadable", f"crontab -l failed ({why}); refusing to edit a crontab that cannot be read")


def _backup_dir(req):
    d = req.get("backup_dir")
    if not d:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        d = os.path.join(base, "fleetdeck", "backups")
    d = os.path.expanduser(d)
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_new(path, data, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("unsupported", f"{_short(path)} is not a regular file")
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _cron_file_path(sched):
    path = sched.get("source") or ""
    if not path.startswith("/") or "\n" in path:
        raise Refused("unsupported", f"cron file {_short(path)} is not an absolute path")
    return path


def inspect_lines(req):
    """Check a crontab / cron-file entry; return the whole file for the controller's backup."""
    s = req["schedule"]
    if s["kind"] == "crontab":
        data = _read_crontab(s.get("user"))
        what = "the crontab of {}".format(_short(s.get("user") or _me()))
        name = "crontab-{}-{}".format(_safe(s.get("user") or _me()), _stamp())
    else:
        path = _cron_file_path(s)
        try:
            data = _read_file(path)[0]
        except FileNotFoundError:
            raise Refused("not-found", f"cron file {_short(path)} no longer exists") from None
        except OSError as e:
            raise Refused("unsupported", f"cannot read cron file {_short(path)} safely: {e.strerror}") from None
        what = _short(path)
        name = f"cron-file-{_safe(os.path.basename(path))}-{_stamp()}"
    new = _without_line(data, s.get("line"), s.get("raw"), what)
    return {"ok": True, "original_b64": base64.b64encode(data).decode(), "sha256": _sha(data),
            "new_sha256": _sha(new), "backup_name": name, "what": what}


def apply_lines(req):
    """Remove the entry: re-check, back up on the host, install the edited file, verify."""
    s = req["schedule"]
    expect = req.get("sha256")
    info = inspect_lines(req)
    if info["sha256"] != expect:
        raise Refused("changed-since-listing", "{} changed after it was checked; nothing edited".format(info["what"]))
    data = base64.b64decode(info["original_b64"])
    new = _without_line(data, s.get("line"), s.get("raw"), info["what"])
    bdir = _backup_dir(req)
    backup = os.path.join(bdir, req.get("backup_name") or info["backup_name"])
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
        raise Refused("verify-failed", f"{info['what']} does not read back as edited (backup kept at {backup})",
                      host_backup=backup)
    return {"ok": True, "host_backup": backup, "message": f"removed line {s['line']} of {info['what']}; backup at {backup}"}


def _install_crontab(user, new, bdir, original):
    name = f".crontab-new-{_stamp()}"
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
        raise Refused("changed-since-listing", f"{_short(path)} changed while it was being edited")
    d, base = os.path.split(path)
    # a dotted name: cron (run-parts rules) never runs a half-written temp file in /etc/cron.d
    tmp = os.path.join(d, f".{base}.fleetdeck-{os.getpid()}.tmp")
    made = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        made = True
        try:
            _write_all(fd, new)
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, st.st_uid, st.st_gid)
            os.fsync(fd)
        finally:
            os.close(fd)
        cur = os.lstat(path)
        if (cur.st_dev, cur.st_ino) != (st.st_dev, st.st_ino):
            raise Refused("changed-since-listing", f"{_short(path)} was replaced while it was being edited")
        os.replace(tmp, path)
    except PermissionError as e:
        raise Refused("permission-denied", f"cannot rewrite {_short(path)}: {e.strerror}") from None
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
        if s.get("user") and s.get("user") != _me():
            argv += ["--machine", "{}@".format(s["user"])]
    return argv


def _timer_state(s):
    unit = s.get("unit") or ""
    if not UNIT_RE.match(unit) or unit.startswith("-"):
        raise Refused("unsupported", f"{_short(unit)} is not a timer unit name")
    rc, out, err = _run(_systemctl(s) + ["show", "-p", "LoadState", "-p", "ActiveState",
                                         "-p", "UnitFileState", "--", unit])
    if rc != 0:
        raise Refused("command-failed", f"systemctl show {unit} failed: {_short(err) or rc}")
    props = dict(x.split("=", 1) for x in out.decode("utf-8", "replace").splitlines() if "=" in x)
    if props.get("LoadState") != "loaded":
        raise Refused("not-found", "timer {} is no longer loaded ({})".format(unit, props.get("LoadState", "?")))
    return unit, props


def inspect_timer(req):
    unit, props = _timer_state(req["schedule"])
    return {"ok": True, "state": props, "what": unit}


def apply_timer(req):
    s = req["schedule"]
    unit, props = _timer_state(s)
    how = ["disable", "--now"]
    note = ""
    if props.get("UnitFileState") in ("static", "transient", "runtime", "generated"):
        # such units cannot be disabled; stopping is all there is
        how = ["stop"]
        note = " (its unit file is {}, so it was stopped, not disabled)".format(props["UnitFileState"])
    rc, _, err = _run(_systemctl(s) + how + ["--", unit])
    if rc != 0:
        raise Refused("command-failed", "systemctl {} {} failed: {}".format(" ".join(how), unit, _short(err) or rc))
    _, after = _timer_state(s)
    if after.get("ActiveState") == "active" or after.get("UnitFileState") == "enabled":
        raise Refused("verify-failed", "timer {} is still {}/{} after {}".format(
            unit, after.get("ActiveState"), after.get("UnitFileState"), " ".join(how)))
    return {"ok": True, "state": after, "message": f"timer {unit} stopped and disabled{note}"}


# -- at jobs --------------------------------------------------------------------------------
def _at_job(s):
    job = str(s.get("job") or "")
    if not job.isdigit():
        raise Refused("unsupported", f"{_short(job)} is not an at job number")
    rc, out, err = _run(["at", "-c", job])
    if rc != 0:
        raise Refused("not-found", f"at job {job} no longer exists")
    want = (s.get("command") or "").strip()
    if not want or want.encode("utf-8", "surrogateescape") not in out:
        raise Refused("changed-since-listing", f"at job {job} no longer runs the listed command")
    return job, out


def inspect_at(req):
    job, out = _at_job(req["schedule"])
    return {"ok": True, "sha256": _sha(out), "what": f"at job {job}"}


def apply_at(req):
    job, out = _at_job(req["schedule"])
    if _sha(out) != req.get("sha256"):
        raise Refused("changed-since-listing", f"at job {job} changed after it was checked")
    rc, _, err = _run(["atrm", job])
    if rc != 0:
        raise Refused("command-failed", f"atrm {job} failed: {_short(err) or rc}")
    if _run(["at", "-c", job])[0] == 0:
        raise Refused("verify-failed", f"at job {job} still exists after atrm")
    return {"ok": True, "message": f"at job {job} removed"}


# -- loops: a process verified by its start time ----------------------------------------------
def _stat(pid):
    """(state, tty_nr, start_time) of a live pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return rest[0].decode(), int(rest[4]), int(rest[19])


def _gone(pid, start):
    st = _stat(pid)
    return st is None or st[2] != start or st[0] in ("Z", "X")


def _loop_target(s):
    pid, start = s.get("pid"), s.get("start_time")
    if not isinstance(pid, int) or not isinstance(start, int) or pid <= 1:
        raise Refused("unsupported", "the listing gave no pid and start time for this loop")
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        raise Refused("not-found", f"process {pid} has already exited")
    if st[2] != start:
        raise Refused("changed-since-listing", f"pid {pid} now belongs to another process (start time {st[2]}, listed {start})")
    return pid, start, st


def _interactive(pid, st):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = []
    try:
        fd0 = os.readlink(f"/proc/{pid}/fd/0")
    except OSError:
        fd0 = ""
    prog = os.path.basename(argv[0]).lstrip("-") if argv else ""
    login = bool(argv) and argv[0].startswith("-")
    on_tty = st[1] != 0 and (fd0.startswith("/dev/pts/") or fd0.startswith("/dev/tty"))
    shell = prog in SHELLS and "-c" not in argv[1:]
    return {"interactive": bool(login or (shell and on_tty)), "tty": fd0 if on_tty else None,
            "argv": argv[:20]}


def inspect_loop(req):
    pid, start, st = _loop_target(req["schedule"])
    info = _interactive(pid, st)
    info.update(ok=True, what=f"process {pid}")
    return info


def _signal(pid, start, sig):
    """Send `sig` only to the listed process, never to whoever reused its pid."""
    fd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError as e:
            if e.errno not in (errno.ENOSYS, errno.EPERM):  # kernels before 5.3, seccomp filters
                raise
    if fd is not None:
        try:
            # the pidfd pins this process; its start time proves it is still the listed one
            if _gone(pid, start):
                return False
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return False
        finally:
            os.close(fd)
        return True
    if _gone(pid, start):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid, start, seconds):
    deadline = time.monotonic() + seconds
    while True:
        if _gone(pid, start):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def apply_loop(req):
    pid, start, st = _loop_target(req["schedule"])
    info = _interactive(pid, st)
    grace = float(req.get("grace", 5.0))
    sent = []
    try:
        if _signal(pid, start, signal.SIGTERM):
            sent.append("SIGTERM")
        if not _wait_gone(pid, start, grace):
            if _signal(pid, start, signal.SIGKILL):
                sent.append("SIGKILL")
            if not _wait_gone(pid, start, 10.0):
                raise Refused("still-running", f"process {pid} survived SIGKILL")
    except PermissionError:
        raise Refused("permission-denied", f"not allowed to signal process {pid}") from None
    how = " then ".join(sent) or "no signal (it had already exited)"
    msg = f"process {pid} stopped with {how}"
    if info["interactive"]:
        msg += "; it was an interactive shell on %s, whose session has closed" % (info["tty"] or "a terminal")
    info.update(ok=True, signals=sent, message=msg)
    return info


OPS = {
    ("inspect", "crontab"): inspect_lines, ("apply", "crontab"): apply_lines,
    ("inspect", "cron-file"): inspect_lines, ("apply", "cron-file"): apply_lines,
    ("inspect", "systemd-timer"): inspect_timer, ("apply", "systemd-timer"): apply_timer,
    ("inspect", "at"): inspect_at, ("apply", "at"): apply_at,
    ("inspect", "loop"): inspect_loop, ("apply", "loop"): apply_loop,
}


def handle(req):
    """Run one request; a failed check is an answer with `ok: false`, never an exception."""
    fn = OPS.get((req.get("op"), (req.get("schedule") or {}).get("kind")))
    if fn is None:
        return {"ok": False, "reason_code": "unsupported",
                "message": "cannot {} a schedule of kind {}".format(req.get("op"), _short((req.get("schedule") or {}).get("kind")))}
    try:
        out = fn(req)
    except Refused as e:
        return dict(e.extra, ok=False, reason_code=e.code, message=e.message)
    except subprocess.TimeoutExpired as e:
        return {"ok": False, "reason_code": "command-failed", "message": f"{e.cmd[0]} timed out"}
    except OSError as e:
        return {"ok": False, "reason_code": "command-failed", "message": "{}: {}".format(
            e.strerror or e, _short(e.filename or ""))}
    out.setdefault("reason_code", None)
    out.setdefault("message", "")
    return out


def main():
    req = json.load(sys.stdin)
    sys.stdout.write(json.dumps(handle(req)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
