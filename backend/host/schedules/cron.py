"""Crontab and cron-file entries for the schedules helper: one line out of a file, every other
byte kept, backed up on the host first and read back byte for byte after."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import base64
import os
import re
import stat

from fleetdeck.backend.host.lib import crontab, files, flags
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsenc, shown_short
from fleetdeck.backend.host.schedules import common
from fleetdeck.backend.host.schedules.wire import Applied, ApplyRequest, Inspected, InspectRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Tuple

# a crontab line that is no schedule: a comment, or an environment setting (`MAILTO=""`)
NOT_AN_ENTRY = re.compile(rb"^\s*(?:#|[A-Za-z_][A-Za-z0-9_]*\s*=)")


def split_lines(data: bytes) -> List[bytes]:
    """The lines of `data` with their own terminators: only b"\\n" ends a line (a CR, a form
    feed or any other byte is part of its line), and an unterminated last line stays so."""
    if not data:
        return []
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def without_line(data: bytes, line: object, raw: object, what: str) -> bytes:
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


def _crontab_argv(user: Optional[str]) -> List[str]:
    # -u only for someone else (it needs root); the probe lists one's own crontab the same way
    return ["crontab"] if not user or user == crontab.me() else ["crontab", "-u", user]


def _read_crontab(user: Optional[str]) -> bytes:
    """The crontab's exact bytes (the host library's one way to read them)."""
    try:
        return crontab.read(user or None)
    except Refused as e:
        if e.code == "crontab-unreadable":
            e.message += "; refusing to edit a crontab that cannot be read"
        raise


def _backup_dir(req: ApplyRequest) -> str:
    d = req.get("backup_dir")
    if not d:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        d = os.path.join(base, "fleetdeck", "backups")
    d = os.path.expanduser(d)
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _write_new(path: str, data: bytes, mode: int = 0o600) -> None:
    fd = os.open(path, flags.CREATE_NEW, mode)
    try:
        files.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path: str) -> Tuple[bytes, os.stat_result]:
    try:
        return files.read_regular(path)
    except files.NotRegular:
        raise Refused("unsupported", "%s is not a regular file" % shown_short(path)) from None


def _cron_file_path(sched: Dict[str, Any]) -> str:
    path = sched.get("source") or ""
    if not path.startswith("/") or "\n" in path:
        raise Refused("unsupported", "cron file %s is not an absolute path" % shown_short(path))
    return path


def _current(s: Dict[str, Any]) -> Tuple[bytes, str, str]:
    """(bytes now, what, backup name) of a crontab or cron file entry's whole file."""
    if s["kind"] == "crontab":
        who = s.get("user") or crontab.me()
        return (
            _read_crontab(s.get("user")),
            "the crontab of %s" % shown_short(who),
            "crontab-%s-%s" % (common.safe(who), common.stamp()),
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
    return (
        data,
        shown_short(path),
        "cron-file-%s-%s" % (common.safe(os.path.basename(path)), common.stamp()),
    )


def inspect_lines(req: InspectRequest) -> Inspected:
    """Check a crontab / cron-file entry; return the whole file for the controller's backup."""
    s = req["schedule"]
    data, what, name = _current(s)
    new = without_line(data, s.get("line"), s.get("raw"), what)
    return {
        "original_b64": base64.b64encode(data).decode(),
        "sha256": common.sha(data),
        "new_sha256": common.sha(new),
        "backup_name": name,
        "what": what,
    }


def apply_lines(req: ApplyRequest) -> Applied:
    """Remove the entry: re-check, back up on the host, install the edited file, verify."""
    s = req["schedule"]
    data, what, name = _current(s)
    if common.sha(data) != req.get("sha256"):
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
        "sha256_after": common.sha(after),
        "witness": {
            "gone": True,
            "checked": what,
            "lines_before": before_n,
            "lines_after": after_n,
            "sha256_after": common.sha(after),
            "said": said,
        },
        "message": "removed line %d of %s (%s); its backup on the host: %s"
        % (s["line"], what, said, shown_short(backup)),
    }


def _install_crontab(user: Optional[str], new: bytes, bdir: str, original: bytes) -> None:
    name = ".crontab-new-%s" % common.stamp()
    tmp = os.path.join(bdir, name)
    _write_new(tmp, new)
    try:
        # last look: between reading and installing, someone may have run crontab -e
        if _read_crontab(user) != original:
            raise Refused("changed-since-listing", "the crontab changed while it was being edited")
        # relative to cwd: vixie crontab truncates file names at 100 bytes (MAX_FNAME)
        rc, _, err = common.run(_crontab_argv(user) + ["./" + name], cwd=bdir)
        if rc != 0:
            raise Refused(
                "install-failed", "crontab refused the edited file: %s" % (shown_short(err) or rc)
            )
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _rewrite_file(path: str, new: bytes, original: bytes) -> None:
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
