"""Which files the distribution installed, as its package manager recorded them.

A file counts as installed by the distribution when a package owns it (dpkg's
`/var/lib/dpkg/info/*.list`, else `rpm -qf`) and its content is still what the package shipped
(the md5 dpkg recorded for it: `Conffiles:` in `/var/lib/dpkg/status` for files under /etc,
`PKG.md5sums` otherwise; `rpm -V` on rpm systems). A package file someone edited is not the
distribution's any more: a line added to /etc/crontab is the editor's. dpkg's records are read
once and kept until dpkg changes them (the mtime of its info folder and status file).
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import hashlib
import os

from fleetdeck.backend.host.lib import runner

DPKG_INFO = "/var/lib/dpkg/info"
DPKG_STATUS = "/var/lib/dpkg/status"
# only these paths are ever asked about: the index keeps nothing else
PREFIXES = ("/etc/cron", "/etc/anacrontab", "/etc/systemd/", "/lib/systemd/", "/usr/lib/systemd/")
_STATE: dict = {}


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _variants(path: str) -> list[str]:
    """The path, and its other spelling on a merged /usr (dpkg records /lib, systemd /usr/lib)."""
    out = [path]
    for a, b in (("/usr/lib/", "/lib/"), ("/lib/", "/usr/lib/")):
        if path.startswith(a):
            out.append(b + path[len(a) :])
    return out


def _dpkg_index() -> tuple[dict[str, str], dict[str, str]]:
    """({path: package} for PREFIXES paths, {path: md5} of conffiles), cached on dpkg's mtimes."""
    key = (_mtime(DPKG_INFO), _mtime(DPKG_STATUS))
    hit = _STATE.get("dpkg")
    if hit is not None and hit[0] == key:
        return hit[1]
    owners, conffiles = {}, {}  # type: (dict, dict)
    try:
        names = os.listdir(DPKG_INFO)
    except OSError:
        names = []
    for n in names:
        if not n.endswith(".list"):
            continue
        try:
            with open(os.path.join(DPKG_INFO, n), "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"/cron" not in data and b"/systemd/" not in data and b"/anacrontab" not in data:
            continue
        pkg = n[:-5]
        for line in data.decode("utf-8", "surrogateescape").splitlines():
            if line.startswith(PREFIXES):
                owners.setdefault(line, pkg)
    try:
        with open(DPKG_STATUS, "rb") as f:
            status = f.read().decode("utf-8", "surrogateescape")
    except OSError:
        status = ""
    for line in status.splitlines():
        if line.startswith(" /"):
            parts = line.split()
            if len(parts) >= 2 and parts[0].startswith(PREFIXES) and "obsolete" not in parts[2:]:
                conffiles[parts[0]] = parts[1]
    val = (owners, conffiles)
    _STATE["dpkg"] = (key, val)
    return val


def _md5(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 16)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _shipped_md5(pkg: str, path: str, conffiles: dict[str, str]) -> str | None:
    """The md5 dpkg recorded for `path` of `pkg`, or None when it recorded none."""
    if path in conffiles:
        return conffiles[path]
    key = ("md5sums", pkg)
    sums = _STATE.get(key)
    if sums is None:
        sums = {}
        for name in (pkg, pkg.split(":")[0]):
            try:
                with open(os.path.join(DPKG_INFO, name + ".md5sums"), "rb") as f:
                    for line in f.read().decode("utf-8", "surrogateescape").splitlines():
                        md5, _, rel = line.partition("  ")
                        if rel:
                            sums["/" + rel] = md5
                break
            except OSError:
                continue
        _STATE[key] = sums
    return sums.get(path)


def _rpm_installed(path: str) -> str | None:
    key = ("rpm", path, _mtime(path))
    if key in _STATE:
        return _STATE[key]
    ans = None
    if runner.which("rpm"):
        r = runner.run(["rpm", "-qf", "--queryformat", "%{NAME}", "--", path], timeout=20)
        if r.rc == 0 and r.out.strip():
            # `rpm -V` prints a line for each changed file; a 5 in its flags: the digest differs
            v = runner.run(["rpm", "-V", "--nodeps", "--noscripts", "-f", "--", path], timeout=30)
            changed = any(
                line.split()[0][2:3] == b"5" and line.endswith(path.encode())
                for line in v.out.splitlines()
                if line.split()
            )
            ans = "%s (rpm)" % r.out.decode("utf-8", "replace").strip() if not changed else None
    _STATE[key] = ans
    return ans


def installed_by(path: str) -> str | None:
    """The package that installed `path` as it is now, or None (not a package's file, or
    edited since: its md5 differs from the one the package manager recorded)."""
    if os.path.isdir(DPKG_INFO):
        owners, conffiles = _dpkg_index()
        for p in _variants(path):
            pkg = owners.get(p)
            if pkg is None:
                continue
            want = _shipped_md5(pkg, p, conffiles)
            try:
                if want is not None and _md5(path) != want:
                    return None
            except OSError:
                return None
            return pkg
        return None
    return _rpm_installed(path)
