"""The probe's schedules section: crontabs, cron files, systemd timers, at jobs, shell loops."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime

from fleetdeck.backend.host.lib import crontab, packages, runner
from fleetdeck.backend.host.lib.serve import Refused
from fleetdeck.backend.host.lib.text import fsdec, shown
from fleetdeck.backend.host.probe.common import (
    CACHE,
    CRON_D_NAME,
    CRON_RE,
    ENV_RE,
    SYSTEMD_BOOTED,
    TIMER_TTL,
    Procs,
    cached,
    current_user,
    finite,
    guard,
    iso,
    read_text,
    run_text,
    settled,
    stat_key,
)
from fleetdeck.backend.host.probe.entries import (
    cron_next,
    host_now,
    schedule_entry,
    schedule_id,
)
from fleetdeck.backend.host.probe.loops import loops


def _cron_lines(
    text: str,
    kind: str,
    source: str,
    user: str,
    system: bool,
    active: bool = True,
    package: str | None = None,
) -> tuple[list[dict], list[int]]:
    """Entries of a crontab or cron file. `text` holds the file's exact bytes (surrogateescape):
    only "\n" ends a line, so `raw` is the line byte for byte and a carriage return stays
    part of the command, as cron runs it. `package`: the file is the distribution's.
    What is parsed is cached between polls, so no entry holds a time: `next_run` stays None
    here and `_due` works it out at each poll."""
    out, bad = [], []
    seen = {}  # type: dict
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
        seen[key] = seen.get(key, 0) + 1  # the same line twice in one file: two entries, two ids
        sid = (
            schedule_id("c-", *key) if seen[key] == 1 else schedule_id("c-", *(key + (seen[key],)))
        )
        e = schedule_entry(kind, u, spec, rest, source, sid, raw=raw, line=n, active=active)
        if package:
            e.update(system=True, package=package)
        out.append(e)
    return out, bad


def _due(entries: list[dict], now: datetime) -> list[dict]:
    """Cron entries as parsed (perhaps cached for many polls), each copied with the `next_run`
    that `now`, the host's clock at this poll, gives its spec: a cache holds what was parsed,
    never a time, so a next run is never one that has already passed."""
    return [dict(e, next_run=cron_next(e["spec"], now) if e["active"] else None) for e in entries]


def _crontabs(fresh: bool, warnings: list[str], now: datetime) -> list[dict]:
    """Every user's crontab, byte for byte (the host library's `crontab.read`): this user's, and
    when root can list the spool, everyone's. One user's crontab that cannot be read, or that
    belongs to no user any more, is a warning naming that user; the others are still listed."""
    if runner.which("crontab") is None:
        return []  # no cron here: nothing can be scheduled through it
    me = current_user()
    users = [me]
    if os.geteuid() == 0:
        try:
            users += [n for n in crontab.spool_users() if n != me]
        except OSError as e:
            warnings.append(f"crontab spool: {shown(e.strerror or str(e))}")
    out = []
    for u in users:
        key = crontab.stat_key(u)  # changes whenever the crontab does
        hit = CACHE.get(("crontab", u))
        if hit is not None and hit[0] == key and settled(key) and not fresh:
            out += _due(hit[1], now)
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
        CACHE[("crontab", u)] = (key, entries)
        out += _due(entries, now)
    return out


def _cron_files(warnings: list[str], now: datetime) -> list[dict]:
    files = [("/etc/crontab", True)]
    try:
        files += [
            (os.path.join("/etc/cron.d", n), bool(CRON_D_NAME.match(n)))
            for n in sorted(os.listdir("/etc/cron.d"))
        ]
    except OSError:
        pass
    out = []
    for path, active in files:
        try:
            if not os.path.isfile(path):
                continue
            entries, bad = cached(
                "cron-file",
                path,
                lambda p, a=active: _cron_lines(
                    read_text(p), "cron-file", p, "", True, a, packages.installed_by(p)
                ),
            )
            out += _due(entries, now)
            if bad and active:
                warnings.append(
                    "{}: lines {} are not cron entries".format(path, ", ".join(map(str, bad[:5])))
                )
        except OSError as e:
            warnings.append(f"{path}: {e.strerror or e}")
    return out


def _show(base: list[str], units: list[str]) -> dict[str, dict[str, str]]:
    """`systemctl show` of units: {Id: {property: value}} (key=value blocks, never the table)."""
    props = "Id,ActiveState,TimersCalendar,TimersMonotonic,NextElapseUSecRealtime,Unit,ExecStart,User,FragmentPath"
    rc, out, err = run_text(base + ["show", "-p", props, "--"] + units)
    res = {}
    for block in out.split("\n\n"):
        d = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if d.get("Id"):
            res[d["Id"]] = d
    return res


def _timer_names(base: list[str], scope: str) -> dict | None:
    rc, out, err = run_text(base + ["list-timers", "--all", "--output=json", "--no-pager"])
    if rc != 0:  # no systemctl, or no manager to ask (a user without a running user manager)
        return None
    try:
        rows = json.loads(out)
        return {r["unit"]: r for r in rows if isinstance(r, dict) and r.get("unit")}
    except ValueError:
        pass  # systemd without JSON output: find the timer units on disk, ask `show` about them
    dirs = (
        [
            "/etc/systemd/system",
            "/run/systemd/system",
            "/usr/lib/systemd/system",
            "/lib/systemd/system",
        ]
        if scope == "system"
        else [
            os.path.expanduser("~/.config/systemd/user"),
            "/etc/systemd/user",
            "/usr/lib/systemd/user",
        ]
    )
    names = set()
    for d in dirs:
        for sub in ("", "timers.target.wants"):
            try:
                names |= {
                    n
                    for n in os.listdir(os.path.join(d, sub))
                    if n.endswith(".timer") and "@." not in n
                }
            except OSError:
                pass
    return {n: {} for n in sorted(names)}


#: where timer units are made, enabled and started as files (`systemd-run` writes transient
#: ones under /run): a change in any of them lists the timers again at the next poll
TIMER_DIRS = (
    "/etc/systemd/system",
    "/etc/systemd/system/timers.target.wants",
    "/run/systemd/system",
    "/run/systemd/transient",
    "/etc/systemd/user",
    "~/.config/systemd/user",
    "~/.config/systemd/user/timers.target.wants",
)


def _timer_dirs() -> tuple[tuple, bool]:
    """(mtime_ns, inode) of each of TIMER_DIRS (None where it is not), and whether all of them
    are `settled` (a change within the clock's tick could keep an mtime)."""
    key = []  # type: list
    calm = True
    for d in TIMER_DIRS:
        try:
            st = os.stat(os.path.expanduser(d))
        except OSError:
            key.append(None)
            continue
        key.append((st.st_mtime_ns, st.st_ino))
        calm = calm and settled((st.st_mtime_ns,))
    return tuple(key), calm


def _timers(fresh: bool) -> list[dict]:
    if not os.path.isdir(SYSTEMD_BOOTED):
        return []  # systemd is not PID 1 here: no timers can fire
    now = time.time()
    dirs, calm = _timer_dirs()
    hit = CACHE.get(("timers", ""))
    if hit is not None and not fresh and now < hit[0] and hit[2] == dirs and calm:
        return hit[1]
    # the listing is kept TIMER_TTL seconds, never past the first next run it holds (once a
    # timer has fired it is asked about again, so a next run shown has not passed yet), and
    # never past a change in the folders timer units live in
    out, until = [], now + TIMER_TTL
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
            specs = re.findall(
                r"(On\w+)=([^;]+?)\s*;",
                ti.get("TimersCalendar", "") + ti.get("TimersMonotonic", ""),
            )
            spec = ", ".join("{}={}".format(*kv) for kv in specs) or "?"
            m = re.search(r"argv\[\]=(.*?) ;", svc.get("ExecStart", ""))
            cmd = m.group(1) if m else (ti.get("Unit") or row.get("activates") or "")
            user = (svc.get("User") or "root") if scope == "system" else current_user()
            nxt = row.get("next")
            if finite(nxt) and nxt > 0:
                until = min(until, nxt / 1e6)
                nxt = iso(nxt / 1e6)
            else:
                nxt = ti.get("NextElapseUSecRealtime") or None
            frag = ti.get("FragmentPath") or ""
            e = schedule_entry(
                "systemd-timer",
                user,
                spec,
                cmd,
                frag or "systemd",
                schedule_id("t-", "systemd-timer", user, scope, t, spec, cmd),
                unit=t,
                scope=scope,
                next_run=nxt,
                active=ti.get("ActiveState", "active") == "active",
            )
            pkg = packages.installed_by(frag) if frag.startswith("/") else None
            if pkg:
                e.update(system=True, package=pkg)
            out.append(e)
    CACHE[("timers", "")] = (until, out, dirs)
    return out


def _at_jobs(fresh: bool) -> list[dict]:
    key = None
    for d in ("/var/spool/cron/atjobs", "/var/spool/at"):
        try:
            key = stat_key(os.stat(d))
            break
        except OSError:
            pass
    hit = CACHE.get(("atq", ""))
    if hit is not None and key is not None and hit[0] == key and not fresh:
        return hit[1]
    rc, out, err = run_text(["atq"])
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
        if ck not in CACHE:
            CACHE[ck] = (None, _at_command(job.strip()))
        cmd = CACHE[ck][1]
        try:
            nxt = (
                datetime.strptime(when, "%a %b %d %H:%M:%S %Y")
                .astimezone()
                .isoformat(timespec="seconds")
            )
        except ValueError:
            nxt = when
        jobs.append(
            schedule_entry(
                "at",
                user,
                when,
                cmd,
                "atq",
                schedule_id("a-", "at", user, job.strip(), when, cmd),
                job=job.strip(),
                next_run=nxt,
                raw=line,
            )
        )
    CACHE[("atq", "")] = (key, jobs)
    return jobs


def _at_command(job: str) -> str:
    rc, out, err = run_text(["at", "-c", job])
    lines = out.split("\n")
    for i, line in enumerate(lines):  # the job text sits in a here-document at the end
        m = re.search(r"<<\s*'(\w+)'\s*$", line)
        if m:
            body = lines[i + 1 :]
            end = body.index(m.group(1)) if m.group(1) in body else len(body)
            return "\n".join(body[:end]).strip()
    for i, line in enumerate(lines):  # older at: the job text follows the `cd DIR || { ... }` block
        if line.startswith("cd ") and "}" in lines[i:]:
            return "\n".join(lines[lines.index("}", i) + 1 :]).strip()
    return lines[-1].strip() if lines else ""


def schedules(req: dict, procs: Procs, warnings: list[str]) -> list[dict]:
    """Every schedule and loop on the host; each source guarded on its own."""
    fresh = bool(req.get("fresh"))
    now = (
        host_now()
    )  # the host's clock at this poll: every cron entry's next run is worked out from it
    out = []
    for name, fn in (
        ("crontab", lambda: _crontabs(fresh, warnings, now)),
        ("cron files", lambda: _cron_files(warnings, now)),
        ("systemd timers", lambda: _timers(fresh)),
        ("at jobs", lambda: _at_jobs(fresh)),
        ("loops", lambda: loops(procs)),
    ):
        out += guard(warnings, name, fn, [])
    return out
