"""A schedule as the probe lists it: its id, the entry's shape, when a cron spec fires next,
and the paths its command names that do not exist here."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import hashlib
import os
import re
import shlex
from datetime import datetime, timedelta

#: hex digits of a schedule id after its kind letter and dash: 128 bits, so that nobody who can
#: write a crontab line or start a process on a host can make one whose id is another's
ID_HEX = 32
#: the id fleetdeck gave before ids were widened: kind letter, dash, 10 hex digits (40 bits of
#: sha1). A wide id starts with its legacy id, so an acknowledgement that holds the legacy form
#: still names the same schedule (`fleet/schedule_verdict.py` decides when it may be trusted).
LEGACY_HEX = 10


def schedule_id(prefix: str, *parts: object) -> str:
    """A schedule's id: `prefix` + the legacy 10 hex digits of sha1 + 22 of sha256 over `parts`."""
    data = "|".join(str(p) for p in parts).encode("utf-8", "surrogateescape")
    return (
        prefix
        + hashlib.sha1(data).hexdigest()[:LEGACY_HEX]
        + hashlib.sha256(data).hexdigest()[: ID_HEX - LEGACY_HEX]
    )


_CRON_ALIAS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {n: i for i, n in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_DAYS = {n: i for i, n in enumerate("sun mon tue wed thu fri sat".split())}


def _cron_value(text: str, lo: int, hi: int, names: dict[str, int]) -> int:
    """One value of a cron field: a number from `lo` to `hi`, or one of the field's names."""
    v = names[text] if text in names else int(text)
    if not lo <= v <= hi:
        raise ValueError(f"{text} is not from {lo} to {hi}")
    return v


def _cron_field(text: str, lo: int, hi: int, names: dict[str, int] | None = None) -> set[int]:
    """The values a cron field names; ValueError for one cron would refuse (a value past the
    field's range, as an hour of 24, a month's name in another field, a step that is not a
    positive number)."""
    known = names or {}
    vals = set()  # type: set[int]
    for part in text.lower().split(","):
        rng, _, step = part.partition("/")
        every = int(step) if step else 1
        if every < 1:
            raise ValueError(f"step {step}")
        if rng == "*":
            a, b = lo, hi
        else:
            first, _, last = rng.partition("-")
            a = _cron_value(first, lo, hi, known)
            b = _cron_value(last, lo, hi, known) if last else (hi if step else a)
        vals.update(range(a, b + 1, every))
    return vals


def host_now() -> datetime:
    """The host's clock, as cron reads it (local time, naive)."""
    return datetime.now()


#: spec -> (minute computed from, next fire time, its ISO text): a fire time found stays the
#: answer for every minute from the one it was computed from up to itself
_NEXT: dict = {}


def cron_next(spec: str, now: datetime | None = None) -> str | None:
    """The next time (ISO, host-local) a cron spec fires after `now` (default: the host's clock
    now); None for @reboot or junk. A fire time found is kept (`_NEXT`) and given again for
    every later `now` before it: no minute between holds another, so it is still the next."""
    start = (now or host_now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    hit = _NEXT.get(spec)
    if hit is not None and hit[0] <= start <= hit[1]:
        return hit[2]
    found = _cron_next(spec, start)
    if found is None:
        return None
    if len(_NEXT) > 4096:  # specs come and go with crontabs; the memo only saves time
        _NEXT.clear()
    _NEXT[spec] = (start, found[0], found[1])
    return found[1]


def _cron_next(spec: str, start: datetime) -> tuple[datetime, str] | None:
    """(fire time, its ISO text) of the first minute at or after `start` that `spec` fires in,
    or None."""
    try:
        f = _CRON_ALIAS.get(spec, spec).split()
        if len(f) != 5:
            return None
        mins, hours, doms, mons = (
            _cron_field(f[0], 0, 59),
            _cron_field(f[1], 0, 23),
            _cron_field(f[2], 1, 31),
            _cron_field(f[3], 1, 12, _MONTHS),
        )
        dows = {d % 7 for d in _cron_field(f[4], 0, 7, _DAYS)}
    except (ValueError, TypeError):
        return None
    for i in range(366 * 5):  # Feb 29 on a Monday can be years away
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
                    return t, t.astimezone().isoformat(timespec="seconds")
    return None


#: (command, cron) -> the absolute paths it names that must exist: a command is read once (a
#: loop is listed again every poll), whether each path exists is asked every time
_NAMED: dict = {}


def missing_paths(command: str, cron: bool = False) -> list[str]:
    """Absolute paths a command names that do not exist here (redirect targets excepted)."""
    named = _NAMED.get((command, cron))
    if named is None:
        if len(_NAMED) > 4096:  # commands come and go; the memo only saves time
            _NAMED.clear()
        named = _NAMED[(command, cron)] = _named_paths(command, cron)
    return [t for t in named if not os.path.lexists(t)]


def _named_paths(command: str, cron: bool) -> list[str]:
    """The absolute paths `command` names that it needs to exist (not redirect targets, not a
    path a `test` checks for, not a pattern or a kernel file), in order."""
    if cron:  # cron turns the first unescaped % into a newline; what follows is stdin
        command = re.split(r"(?<!\\)%", command, maxsplit=1)[0].replace("\\%", "%")
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        toks = list(lex)
    except ValueError:
        toks = command.split()
    out, skip = [], False  # type: list[str], bool
    for i, t in enumerate(toks):
        if skip:
            skip = False
            continue
        if t and not t.strip("<>&|;()"):
            skip = ">" in t  # an output file need not exist before the job runs
            continue
        if i >= 2 and toks[i - 2] in ("test", "[", "[[") and re.match(r"^-[a-zA-Z]$", toks[i - 1]):
            continue  # `test -x /path || ...` checks for the path; its absence is expected
        if "=" in t and not t.startswith("/"):
            t = t.partition("=")[2]
        if (
            t.startswith("/")
            and not any(c in t for c in "*?[$`{~")
            and not t.startswith(("/dev/", "/proc/", "/sys/"))
        ):
            out.append(t)
    return out


def schedule_entry(
    kind: str, user: str, spec: str, command: str, source: str, sid: str, **kw: object
) -> dict:
    """One schedule in the probe's reply; a command naming missing paths is a dead target."""
    s = {  # type: dict
        "id": sid,
        "kind": kind,
        "user": user,
        "spec": spec,
        "command": command,
        "source": source,
        "next_run": None,
        "pid": None,
        "active": True,
        "start_time": None,
        "reasons": [],
        "raw": None,
        "line": None,
    }
    s.update(kw)
    miss = missing_paths(command, cron=kind in ("crontab", "cron-file"))
    if miss:
        s["reasons"].append("dead-target")
        s["missing_paths"] = miss
    return s
