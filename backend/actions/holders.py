"""Who holds a path on a host: the processes with a file under it open, mapped, or as their cwd
or root, as purge's own in-use reader sees them (`host/holders.py` runs it on the host).

A read, not an action: nothing is changed and nothing is audited. The host's answer is checked
item by item here (bounded counts and text, known kinds of use); text stays as the host sent
it and is escaped where it is shown (`shown`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetdeck.backend.actions import fronts
from fleetdeck.backend.fleet.errors import HelperError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host import holders_wire

#: how a process uses a file: an open descriptor, a mapping, its working or root folder
USES = ("fd", "maps", "cwd", "root")
MAX_HOLDERS = 4096
MAX_TEXT = 4096
#: what a read of every process's fds and maps may take on a busy host (seconds)
WITHIN = 120.0


@dataclass(frozen=True)
class Use:
    """One way a process holds a file under the path."""

    how: str
    file: str


@dataclass(frozen=True)
class Holder:
    """A process that holds a file under the path: pid and start time (its identity), owner,
    command line, and up to 20 of its uses (`more_uses` counts the rest)."""

    pid: int
    start: int
    user: str
    command: str
    comm: str
    uses: tuple[Use, ...]
    more_uses: int = 0

    def to_json(self) -> dict[str, Any]:
        """The holder as JSON (text as the host gave it)."""
        return {
            "pid": self.pid,
            "start": self.start,
            "user": self.user,
            "command": self.command,
            "comm": self.comm,
            "uses": [{"how": u.how, "file": u.file} for u in self.uses],
            "more_uses": self.more_uses,
        }


@dataclass(frozen=True)
class HoldersReport:
    """The holders of `path` on `host`: `processes` is how many the host read (the witnesses),
    `complete` false when the folder was too big to index whole (`entries` indexed)."""

    host: str
    path: str
    resolved: str
    kind: str
    entries: int
    complete: bool
    processes: int
    holders: tuple[Holder, ...]
    unreadable: tuple[tuple[int, str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """`fleetdeck holders --json`."""
        return {
            "host": self.host,
            "path": self.path,
            "resolved": self.resolved,
            "kind": self.kind,
            "entries": self.entries,
            "complete": self.complete,
            "processes_read": self.processes,
            "holders": [h.to_json() for h in self.holders],
            "unreadable": [{"pid": p, "comm": c, "error": e} for p, c, e in self.unreadable],
        }


def _int(v: int, key: str, hi: int = 2**63 - 1) -> int:
    if not 0 <= v <= hi:
        raise ValueError(key)
    return v


def _holder(d: holders_wire.Holder) -> Holder:
    return Holder(
        pid=_int(d["pid"], "pid", 2**31),
        start=_int(d["start"], "start"),
        user=d["user"][:MAX_TEXT],
        command=d["command"][:MAX_TEXT],
        comm=d["comm"][:MAX_TEXT],
        uses=tuple(Use(u["how"], u["file"][:MAX_TEXT]) for u in d["uses"][:MAX_HOLDERS]),
        more_uses=_int(d["more_uses"], "more_uses"),
    )


def report_from_answer(host: str, ans: holders_wire.Holders) -> HoldersReport:
    """The typed report of a holders answer held to its record (`holders_wire.Holders`):
    counts and text bounded; ValueError naming the first field out of its bounds."""
    items = ans["holders"]
    if len(items) > MAX_HOLDERS:
        raise ValueError("holders")
    unreadable = tuple(
        (_int(u["pid"], "pid", 2**31), u["comm"][:MAX_TEXT], u["error"][:MAX_TEXT])
        for u in ans["unreadable"][:MAX_HOLDERS]
    )
    return HoldersReport(
        host=host,
        path=ans["path"][:MAX_TEXT],
        resolved=ans["resolved"][:MAX_TEXT],
        kind=ans["kind"],
        entries=_int(ans["entries"], "entries"),
        complete=ans["complete"],
        processes=_int(ans["processes"], "processes"),
        holders=tuple(_holder(h) for h in items),
        unreadable=unreadable,
    )


async def find_holders(link: HostLink, path: str) -> HoldersReport:
    """The processes on `link`'s host holding a file under `path`. HelperError (a HostError)
    with the helper's code (`not-found`, `not-absolute`, `not-normalized`) when it refused;
    HostError when the host could not be asked or its answer is not a holders answer (code
    `bad-answer`: a field not its declared type, `holders_wire.Holders`, or out of bounds)."""
    ans = await fronts.holders(link, {"path": path}, within=WITHIN)
    try:
        return report_from_answer(link.name, ans)
    except ValueError as e:
        raise HelperError(
            link.name, f"the holders answer has a bad field: {e}", "bad-answer", ans
        ) from None
