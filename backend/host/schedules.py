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

Every `apply` that succeeds names its witness, what it re-read after the change and found
gone: `{"witness": {"gone": true, "checked": ..., "said": SENTENCE, ...}}` (the crontab or
file re-read one line shorter and byte for byte the edited text; the timer's state re-read
inactive and not enabled; `at -c` finding no job; none of the loop's processes left in /proc).
An entry with nothing to remove is refused `nothing-to-remove`: a listed line that is blank, a
comment or a variable assignment, a timer already inactive and not enabled.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
import sys
import time

from fleetdeck.backend.host.lib import crontab, files, flags, runner
from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.lib.text import fsenc, shown_short
from fleetdeck.backend.host.schedules_loops import apply_loop, inspect_loop

UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.timer$")
# a crontab line that is no schedule: a comment, or an environment setting (`MAILTO=""`)
NOT_AN_ENTRY = re.compile(rb"^\s*(?:#|[A-Za-z_][A-Za-z0-9_]*\s*=)")
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
        raise Refused(
            "changed-since-listing",
            "%s now has %d lines, so line %d is gone" % (what, len(lines), line),
        )
    got = lines[line - 1]
    if got.endswith(b"\n"):
        got = got[:-1]
    if got != want:
        raise Refused(
            "changed-since-listing",
            "line %d of %s now reads %s, not the listed %s"
            % (line, what, shown_short(got), shown_short(want)),
        )
    if not want.strip() or NOT_AN_ENTRY.match(want):
        raise Refused(
            "nothing-to-remove",
            "line %d of %s holds no schedule (%s): nothing to remove"
            % (
                line,
                what,
                "it is blank" if not want.strip() else "it reads %s" % shown_short(want),
            ),
        )
    return b"".join(lines[: line - 1] + lines[line:])


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
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        d = os.path.join(base, "fleetdeck", "backups")
    d = os.path.expanduser(d)
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _write_new(path, data, mode=0o600):
    fd = os.open(path, flags.CREATE_NEW, mode)
    try:
        files.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path):
    try:
        return files.read_regular(path)
    except files.NotRegular:
        raise Refused("unsupported", "%s is not a regular file" % shown_short(path)) from None


def _cron_file_path(sched):
    path = sched.get("source") or ""
    if not path.startswith("/") or "\n" in path:
        raise Refused("unsupported", "cron file %s is not an absolute path" % shown_short(path))
    return path


def _current(s):
    """(bytes now, what, backup name) of a crontab or cron file entry's whole file."""
    if s["kind"] == "crontab":
        who = s.get("user") or crontab.me()
        return (
            _read_crontab(s.get("user")),
            "the crontab of %s" % shown_short(who),
            "crontab-%s-%s" % (_safe(who), _stamp()),
        )
    path = _cron_file_path(s)
    try:
        data = _read_file(path)[0]
    except FileNotFoundError:
        raise Refused("not-found", "cron file %s no longer exists" % shown_short(path)) from None
    except OSError as e:
        raise Refused(
            "unsupported", "cannot read cron file %s safely: %s" % (shown_short(path), e.strerror)
        ) from None
    return data, shown_short(path), "cron-file-%s-%s" % (_safe(os.path.basename(path)), _stamp())


def inspect_lines(req):
    """Check a crontab / cron-file entry; return the whole file for the controller's backup."""
    s = req["schedule"]
    data, what, name = _current(s)
    new = without_line(data, s.get("line"), s.get("raw"), what)
    return {
        "original_b64": base64.b64encode(data).decode(),
        "sha256": _sha(data),
        "new_sha256": _sha(new),
        "backup_name": name,
        "what": what,
    }


def apply_lines(req):
    """Remove the entry: re-check, back up on the host, install the edited file, verify."""
    s = req["schedule"]
    data, what, name = _current(s)
    if _sha(data) != req.get("sha256"):
        raise Refused(
            "changed-since-listing", "%s changed after it was checked; nothing edited" % what
        )
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
    before_n, after_n = len(split_lines(data)), len(split_lines(after))
    if after != new or after_n != before_n - 1:
        raise Refused(
            "verify-failed",
            "%s does not read back byte for byte as edited (backup kept at %s)"
            % (what, shown_short(backup)),
            host_backup=backup,
        )
    said = (
        "re-read, %s holds %d line%s, one fewer than the %d before, byte for byte the file "
        "without line %d" % (what, after_n, "" if after_n == 1 else "s", before_n, s["line"])
    )
    return {
        "host_backup": backup,
        "sha256_after": _sha(after),
        "witness": {
            "gone": True,
            "checked": what,
            "lines_before": before_n,
            "lines_after": after_n,
            "sha256_after": _sha(after),
            "said": said,
        },
        "message": "removed line %d of %s (%s); backup at %s"
        % (s["line"], what, said, shown_short(backup)),
    }


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
            raise Refused(
                "install-failed", "crontab refused the edited file: %s" % (shown_short(err) or rc)
            )
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _rewrite_file(path, new, original):
    data, st = _read_file(path)
    if data != original:
        raise Refused(
            "changed-since-listing", "%s changed while it was being edited" % shown_short(path)
        )
    d, base = os.path.split(path)
    # a dotted name: cron (run-parts rules) never runs a half-written temp file in /etc/cron.d
    tmp = os.path.join(d, ".%s.fleetdeck-%d.tmp" % (base, os.getpid()))
    made = False
    try:
        fd = os.open(tmp, flags.CREATE_NEW, 0o600)
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
            raise Refused(
                "changed-since-listing",
                "%s was replaced while it was being edited" % shown_short(path),
            )
        os.replace(tmp, path)
    except PermissionError as e:
        raise Refused(
            "permission-denied", "cannot rewrite %s: %s" % (shown_short(path), e.strerror)
        ) from None
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
        raise Refused("unsupported", "%s is not a timer unit name" % shown_short(unit))
    rc, out, err = _run(
        _systemctl(s)
        + ["show", "-p", "LoadState", "-p", "ActiveState", "-p", "UnitFileState", "--", unit]
    )
    if rc != 0:
        raise Refused(
            "command-failed", "systemctl show %s failed: %s" % (unit, shown_short(err) or rc)
        )
    props = dict(x.split("=", 1) for x in out.decode("utf-8", "replace").splitlines() if "=" in x)
    if props.get("LoadState") != "loaded":
        raise Refused(
            "not-found", "timer %s is no longer loaded (%s)" % (unit, props.get("LoadState", "?"))
        )
    return unit, props


def inspect_timer(req):
    unit, props = _timer_state(req["schedule"])
    return {"state": props, "what": unit}


def apply_timer(req):
    s = req["schedule"]
    unit, props = _timer_state(s)
    if props.get("ActiveState") != "active" and not (props.get("UnitFileState") or "").startswith(
        "enabled"
    ):
        raise Refused(
            "nothing-to-remove",
            "timer %s is already %s and %s: nothing to stop or disable"
            % (
                unit,
                props.get("ActiveState") or "inactive",
                props.get("UnitFileState") or "not enabled",
            ),
        )
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
        raise Refused(
            "command-failed",
            "systemctl %s %s failed: %s" % (" ".join(how), unit, shown_short(err) or rc),
        )
    try:
        _, after = _timer_state(s)
    except Refused as e:
        if e.code != "not-found":
            raise
        after = {"LoadState": "not-found"}  # a stopped transient timer is unloaded: gone is done
    # enabled-runtime counts: it starts again at the next boot of this manager just the same
    if after.get("ActiveState") == "active" or (after.get("UnitFileState") or "").startswith(
        "enabled"
    ):
        raise Refused(
            "verify-failed",
            "timer %s is still %s/%s after %s"
            % (unit, after.get("ActiveState"), after.get("UnitFileState"), " ".join(how)),
        )
    done = "stopped" if how == ["stop"] else "stopped and disabled"
    said = "re-read, systemd says timer %s is %s" % (
        unit,
        ", ".join(
            "%s=%s" % (k, after[k])
            for k in ("LoadState", "ActiveState", "UnitFileState")
            if after.get(k)
        ),
    )
    return {
        "state": after,
        "witness": {
            "gone": True,
            "checked": "systemctl show %s" % unit,
            "state": after,
            "said": said,
        },
        "message": "timer %s %s%s (%s)" % (unit, done, note, said),
    }


# -- at jobs --------------------------------------------------------------------------------
def _at_job(s):
    job = str(s.get("job") or "")
    if not job.isdigit():
        raise Refused("unsupported", "%s is not an at job number" % shown_short(job))
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
        raise Refused("command-failed", "atrm %s failed: %s" % (job, shown_short(err) or rc))
    if _run(["at", "-c", job])[0] == 0:
        raise Refused("verify-failed", "at job %s still exists after atrm" % job)
    said = "re-read, at -c %s finds no such job" % job
    return {
        "witness": {"gone": True, "checked": "at -c %s" % job, "said": said},
        "message": "at job %s removed (%s)" % (job, said),
    }


KINDS = {
    "crontab": (inspect_lines, apply_lines),
    "cron-file": (inspect_lines, apply_lines),
    "systemd-timer": (inspect_timer, apply_timer),
    "at": (inspect_at, apply_at),
    "loop": (inspect_loop, apply_loop),
}


def _by_kind(which):
    def op(req):
        s = req.get("schedule")
        kind = s.get("kind") if isinstance(s, dict) else None
        fns = KINDS.get(kind)
        if fns is None:
            raise Refused(
                "unsupported",
                "cannot %s a schedule of kind %s"
                % (("inspect", "apply")[which], shown_short(str(kind))),
            )
        try:
            return fns[which](req)
        except OSError as e:
            raise Refused(
                "command-failed", "%s: %s" % (e.strerror or e, shown_short(e.filename or ""))
            ) from None

    return op


OPS = {"inspect": _by_kind(0), "apply": _by_kind(1)}

if __name__ == "__main__":
    sys.exit(serve(OPS))
