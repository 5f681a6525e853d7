"""Proposals: an action an agent planned and a person may carry out, kept in the state folder.

An MCP plan tool (`cli/mcp_propose.py`) runs an action's full pre-flight and records what it
found here; nothing on a host changes. A person then confirms it (`fleetdeck proposals confirm`
or the dashboard's Proposals view) through the action's own typed confirmation, after the plan
was made again on the host (`proposal_plans.replan`), or rejects it.

Each proposal is one file, `proposals/<id>.json` (the folder mode 700, each file 600), written
whole to a temporary name, fsynced and renamed, so a reader never sees half of one. A file
that cannot be read or does not hold a proposal is reported by name and reason
(`ProposalStore.problems`), never a crash, and never acted on. At most `MAX_PENDING` wait at
once (a further proposal is refused `too-many-proposals`); a pending one expires `TTL_S`
(24 h) after it was made; a settled or expired one is deleted `KEEP_S` (7 days) after it
ended, so the folder stays bounded. Every proposal and every outcome is audited with its origin.

A confirmed proposal names the process that claimed it (machine, boot, pid and start time). When
that process is gone (it was killed, or the machine rebooted) without saying how the action
ended, the proposal reads `abandoned`: final, never carried out again, and the audit log says
how far the action got.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet.statedir import read_file, state_dir
from fleetdeck.backend.host.lib import procfs

#: the kinds of action an agent may propose
KINDS = ("purge", "mirror", "launch", "remove-schedule")
#: how long a proposal waits for a person, and how long its file is kept once it ended
TTL_S = 24 * 3600.0
KEEP_S = 7 * 86400.0
#: how many may wait at once, and how many files the folder holds at most
MAX_PENDING = 50
MAX_FILES = 500
#: what one proposal file may hold (the plan is bounded by the tool that made it)
FILE_LIMIT = 4 * 2**20
#: what a reason may hold, in characters
REASON_MAX = 2000
#: an id: 12 lowercase hex digits (nothing else ever reaches the filesystem)
ID_RE = re.compile(r"[0-9a-f]{12}")
#: pending -> confirmed (a person started it) -> done | failed; or refused, rejected, expired
STATES = ("pending", "confirmed", "done", "failed", "refused", "rejected", "expired")
#: what a state file never holds but `state_at` reads: expired (a pending one past its expiry),
#: abandoned (a confirmed one whose claiming process is gone)
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class ProposalError(Exception):
    """A proposal that cannot be used: `code` (not-found, bad-id, corrupt, expired, settled,
    too-many-proposals, unwritable) and a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Proposal:
    """One proposed action: who asked for it and why, its arguments, the plan as the host's
    checks made it then (`plan`, the action's own plan JSON), the facts a later plan must
    match (`facts`), and how it ended (`state`, `outcome`)."""

    id: str
    kind: str
    host: str
    #: the arguments the plan was made with (the action's own names: paths, src, dst...)
    args: dict[str, Any]
    reason: str
    #: who proposed it: {"via": "mcp", "client": name or None}
    origin: dict[str, Any]
    #: True when every check passed at planning time
    ok: bool
    plan: dict[str, Any]
    facts: dict[str, Any]
    created: float
    expires: float
    state: str = "pending"
    #: how it ended: {"time", "by", "result", "code", "message", "exit"}
    outcome: dict[str, Any] | None = None
    #: one line naming what it would do, for listings
    summary: str = ""
    #: what the refusal codes of the plan were when it was made (empty when ok)
    refused: tuple[str, ...] = field(default_factory=tuple)

    def state_at(self, now: float) -> str:
        """The state as of `now`: a pending proposal past its expiry is `expired`; a confirmed
        one whose claiming process is known to be gone is `abandoned`."""
        if self.state == "pending" and now >= self.expires:
            return "expired"
        if self.state == "confirmed" and claim_gone((self.outcome or {}).get("claimant")):
            return "abandoned"
        return self.state

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        """The proposal as `fleetdeck proposals show --json` prints it."""
        d = asdict(self)
        d["refused"] = list(self.refused)
        d["state"] = self.state_at(time.time() if now is None else now)
        return d


@functools.cache
def _boot() -> str | None:
    """This boot's id (the kernel's), or None where it cannot be read; read once, as it cannot
    change while this process lives."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def claimant() -> dict[str, Any]:
    """Who is claiming a proposal: this machine, this boot, this process and its start time."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "boot": _boot(),
        "pid": pid,
        "start": procfs.start_ticks(pid),
    }


def claim_gone(claim: Any) -> bool:
    """True only when the process named by `claim` is known to be gone: same machine, and
    another boot or no live process with that pid and start time. A claim from another
    machine, or one that names no process, is never taken as gone."""
    if not isinstance(claim, dict) or claim.get("host") != socket.gethostname():
        return False
    boot, pid, start = claim.get("boot"), claim.get("pid"), claim.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(start, int):
        return False
    now_boot = _boot()
    if isinstance(boot, str) and now_boot is not None and boot != now_boot:
        return True
    return not procfs.same_process(pid, start)


def proposals_dir() -> Path:
    """`<state folder>/proposals`, created mode 700 on demand."""
    d = state_dir() / "proposals"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def check_id(pid: str) -> str:
    """`pid` when it is an id (12 hex digits); ProposalError `bad-id` otherwise."""
    if not isinstance(pid, str) or not ID_RE.fullmatch(pid):
        raise ProposalError("bad-id", "a proposal id is 12 hexadecimal digits")
    return pid


def _write(p: Proposal, record: dict[str, Any], result: str) -> None:
    """Write `p` whole under its final name, audited: a temporary file (mode 600) is written
    and fsynced first, then the audit record (`result`, `record`), then the rename. So a full
    disk leaves neither a record of a change that was not saved nor a file nothing audited;
    ProposalError `unwritable` when either cannot be written (the temporary file removed)."""
    d = proposals_dir()
    data = (json.dumps(asdict(p), ensure_ascii=True, default=str, indent=1) + "\n").encode()
    tmp = d / f".{p.id}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.write(fd, view[done:])
            os.fsync(fd)
        finally:
            os.close(fd)
        audit.audit("proposal", p.host, result, **record)
        os.replace(tmp, d / f"{p.id}.json")
        dfd = os.open(d, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except (OSError, audit.AuditError) as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        why = e.message if isinstance(e, audit.AuditError) else str(e)
        raise ProposalError(
            "unwritable", f"the proposal could not be saved in {d}: {why}"
        ) from None


def _parse(pid: str, raw: bytes) -> Proposal:
    """A proposal from its file's bytes; ValueError naming what is wrong."""
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("it is not a JSON object")
    want: dict[str, type | tuple[type, ...]] = {
        "id": str,
        "kind": str,
        "host": str,
        "args": dict,
        "reason": str,
        "origin": dict,
        "ok": bool,
        "plan": dict,
        "facts": dict,
        "created": (int, float),
        "expires": (int, float),
        "state": str,
        "summary": str,
    }
    for key, typ in want.items():
        if not isinstance(doc.get(key), typ):
            raise ValueError(f"its {key!r} is missing or of the wrong type")
    if doc["id"] != pid:
        raise ValueError(f"it names another id ({doc['id']!r})")
    if doc["kind"] not in KINDS or doc["state"] not in STATES:
        raise ValueError(
            f"kind {doc['kind']!r} or state {doc['state']!r} is not one fleetdeck knows"
        )
    outcome = doc.get("outcome")
    if outcome is not None and not isinstance(outcome, dict):
        raise ValueError("its 'outcome' is not an object")
    refused = doc.get("refused") or []
    if not isinstance(refused, list) or not all(isinstance(c, str) for c in refused):
        raise ValueError("its 'refused' is not a list of codes")
    return Proposal(
        **{k: doc[k] for k in want},
        outcome=outcome,
        refused=tuple(refused),
    )


class ProposalStore:
    """The proposals folder: read, add, settle, prune. `clock` is injectable; `problems` holds
    a sentence for every file the last `load` could not read as a proposal."""

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.problems: list[str] = []

    def load(self) -> list[Proposal]:
        """Every readable proposal, newest first; unreadable files named in `problems`."""
        self.problems = []
        d = proposals_dir()
        out = []
        for name in sorted(os.listdir(d)):
            if name.startswith("."):
                continue
            pid = name.removesuffix(".json")
            if not name.endswith(".json") or not ID_RE.fullmatch(pid):
                self.problems.append(f"{d / name}: not a proposal file name; ignored")
                continue
            try:
                out.append(_parse(pid, read_file(d / name, FILE_LIMIT)))
            except (OSError, ValueError, TypeError) as e:
                self.problems.append(f"{d / name}: unreadable, ignored ({e})")
        out.sort(key=lambda p: p.created, reverse=True)
        return out

    def get(self, pid: str) -> Proposal:
        """The proposal `pid`; ProposalError bad-id, not-found or corrupt."""
        path = proposals_dir() / f"{check_id(pid)}.json"
        try:
            return _parse(pid, read_file(path, FILE_LIMIT))
        except FileNotFoundError:
            raise ProposalError(
                "not-found", f"no proposal {pid} (ended ones are deleted after 7 days)"
            ) from None
        except (OSError, ValueError, TypeError) as e:
            raise ProposalError("corrupt", f"proposal {pid} cannot be read: {e}") from None

    def add(
        self,
        kind: str,
        host: str,
        args: dict[str, Any],
        reason: str,
        origin: dict[str, Any],
        *,
        ok: bool,
        plan: dict[str, Any],
        facts: dict[str, Any],
        summary: str,
        refused: tuple[str, ...] = (),
    ) -> Proposal:
        """Record a new pending proposal and audit it; ProposalError `too-many-proposals` when
        MAX_PENDING already wait, `unwritable` when it cannot be saved or audited."""
        now = self.clock()
        self.prune()
        waiting = [p for p in self.load() if p.state_at(now) == "pending"]
        if len(waiting) >= MAX_PENDING:
            raise ProposalError(
                "too-many-proposals",
                f"{len(waiting)} proposals already wait for a person (at most {MAX_PENDING}); "
                "nothing was recorded",
            )
        p = Proposal(
            id=secrets.token_hex(6),
            kind=kind,
            host=host,
            args=args,
            reason=reason[:REASON_MAX],
            origin=origin,
            ok=ok,
            plan=plan,
            facts=facts,
            created=now,
            expires=now + TTL_S,
            summary=summary,
            refused=tuple(refused),
        )
        _write(p, _record(p), "proposed")
        return p

    def settle(self, p: Proposal, state: str, by: str, **outcome: Any) -> Proposal:
        """`p` moved on (`state` one of STATES after pending); saved and audited with its
        origin. Only from the state `p` holds: when its file says otherwise (someone else
        confirmed or rejected it meanwhile) ProposalError `settled`, and nothing is written, so
        two people confirming one proposal cannot both carry it out. Returns the proposal as
        saved. An outcome that cannot be saved and audited is ProposalError `unwritable`: said,
        never dropped silently."""
        if state == "confirmed":
            outcome["claimant"] = claimant()
        done = replace(p, state=state, outcome={"time": self.clock(), "by": by, **outcome})
        fd = os.open(proposals_dir() / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = self.get(p.id)
            if now.state != p.state:
                raise ProposalError("settled", f"proposal {p.id} is already {now.state}")
            seen = now.state_at(self.clock()) if state == "confirmed" else "pending"
            if seen != "pending":  # an expired proposal is never claimed
                raise ProposalError("settled", f"proposal {p.id} is already {seen}")
            _write(done, _record(done), state)
        finally:
            os.close(fd)
        return done

    def prune(self) -> int:
        """Delete files of proposals that ended (or expired) more than KEEP_S ago, and the
        oldest ended ones past MAX_FILES; the number deleted."""
        now = self.clock()
        ended = []
        for p in self.load():
            end = p.expires if p.state_at(now) == "expired" else (p.outcome or {}).get("time")
            # one left `confirmed` (the process carrying it out died) ends with that record
            if p.state_at(now) == "pending" or not isinstance(end, int | float):
                continue
            ended.append((end, p.id))
        ended.sort()
        old = [pid for end, pid in ended if now - end > KEEP_S]
        excess = max(0, len(os.listdir(proposals_dir())) - MAX_FILES)
        old += [pid for _, pid in ended if pid not in old][:excess]
        for pid in old:
            try:
                (proposals_dir() / f"{pid}.json").unlink()
            except OSError:
                pass
        return len(old)


def _record(p: Proposal) -> dict[str, Any]:
    """What the audit log keeps of a proposal (not its whole plan)."""
    return {
        "proposal": p.id,
        "kind": p.kind,
        "origin": p.origin,
        "reason": p.reason,
        "args": p.args,
        "ok": p.ok,
        "refused": list(p.refused),
        "outcome": p.outcome,
    }
