"""The plans behind proposals: each kind's full pre-flight, run with nothing changed on a host,
and the facts a later plan must match for the proposal to still stand.

`make_plan(fleet, kind, args)` runs the same checks the CLI's dry run / plan runs (purge:
`gather_purge` or `gather_keep_newest`; mirror: `mirror(..., dry_run=True)`; launch:
`preflight`; remove-schedule: a fresh listing and `check_removal`) and returns a `Planned`:
the action's own plan JSON, whether every check passed, and `facts`, a small dict of what the
verdict rests on (pins, sizes, keepers' sha256 and signatures, the run file's sha256, the
listed entry). `changed(old, new)` names the facts that moved; `rejudge` makes a proposal's plan again and
says whether it still stands. None of these functions
deletes, copies, starts, stops or writes anything on a host, nor writes the audit log.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from fleetdeck.backend.actions.launch.main import preflight
from fleetdeck.backend.actions.mirror.main import mirror, parse_endpoint
from fleetdeck.backend.actions.proposals import Proposal
from fleetdeck.backend.actions.purge.main import gather_keep_newest, gather_purge
from fleetdeck.backend.actions.purge.plan import PurgePlan
from fleetdeck.backend.actions.schedules import check_removal
from fleetdeck.backend.fleet.config import ConfigError, Fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.fleet.poller import poll_fleet
from fleetdeck.backend.fleet.statedir import read_file
from fleetdeck.backend.host.lib.text import shown

#: the most paths one purge proposal may name, and the most files a stored plan lists
PATHS_MAX = 64
FILES_MAX = 500


class PlanRefused(Exception):
    """Arguments a plan cannot be made from (a bad path list, an unknown schedule...): `code`
    and a sentence. Nothing was asked of a host beyond reading."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Planned:
    """A plan made now: `plan` the action's plan JSON (lists bounded), `ok` every check passed,
    `refused` the refusal codes, `facts` what a later plan must match, `summary` one line."""

    host: str
    ok: bool
    plan: dict[str, Any]
    facts: dict[str, Any]
    summary: str
    refused: tuple[str, ...] = ()
    #: the typed object the dashboard's pop-up can show as it is (PurgePlan, RemovalCheck...)
    typed: Any = None


def digest(value: Any) -> str:
    """A short sha256 of `value` as canonical JSON: a fact too big to keep whole."""
    raw = json.dumps(value, sort_keys=True, ensure_ascii=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def _bounded(items: list[Any]) -> tuple[list[Any], int]:
    return items[:FILES_MAX], max(0, len(items) - FILES_MAX)


def purge_facts(plan: PurgePlan) -> dict[str, Any]:
    """What a purge's verdict rests on: each path's identity, size and verdict, each keeper's
    sha256 and signature, the keep rule's choice, and every checkpoint of the runs it touches."""
    return {
        "paths": digest(
            [
                [p.path, p.resolved, p.bytes, p.refused, [list(x) for x in p.pins]]
                for p in plan.paths
            ]
        ),
        "verdict": [sorted(set(p.refused)) for p in plan.paths],
        "keepers": digest([[k.path, k.sha256_before, list(k.signature)] for k in plan.keepers]),
        "keep": digest(plan.keep.to_json()) if plan.keep else None,
        "checkpoints": digest([[list(c[:2]) for c in e.checkpoints] for e in plan.evals]),
        "ok": plan.ok,
    }


async def _purge(fleet: Fleet, args: dict[str, Any]) -> Planned:
    host = fleet.host(str(args["host"]))
    paths = args.get("paths")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise PlanRefused("bad-arguments", "paths must be a non-empty list of literal paths")
    if len(paths) > PATHS_MAX or any(not p or "\x00" in p for p in paths):
        raise PlanRefused("bad-arguments", f"at most {PATHS_MAX} paths, none empty or with NUL")
    keep = args.get("keep_newest")
    async with HostLink(host) as link:
        if keep:
            if len(paths) != 1 or not isinstance(keep, int) or keep < 1:
                raise PlanRefused("bad-arguments", "keep_newest takes one run folder and N >= 1")
            plan = await gather_keep_newest(link, paths[0], keep)
        else:
            plan = await gather_purge(link, paths)
    doc = plan.to_json()
    codes = tuple(sorted({c for p in plan.paths for c in p.refused}))
    if plan.keep is not None and plan.keep.refusal is not None:
        codes = (plan.keep.refusal.code, *codes)
    if plan.ok and not plan.keepers:
        codes = codes or ("no-keeper",)
    n = len(plan.paths)
    what = f"purge {n} path{'s' if n != 1 else ''} on {host.name}, {plan.expected_bytes} bytes"
    return Planned(host.name, plan.ok, doc, purge_facts(plan), what, codes, plan)


async def _mirror(fleet: Fleet, args: dict[str, Any]) -> Planned:
    try:
        sh, sp = parse_endpoint(str(args["src"]))
        dh, dp = parse_endpoint(str(args["dst"]))
    except ValueError as e:
        raise PlanRefused("bad-arguments", str(e)) from None
    src_cfg, dst_cfg = fleet.host(sh), fleet.host(dh)
    async with HostLink(src_cfg) as sl:
        if dh == sh:
            rep = await mirror(sl, sp, sl, dp, dry_run=True)
        else:
            async with HostLink(dst_cfg) as dl:
                rep = await mirror(sl, sp, dl, dp, dry_run=True)
    doc = rep.to_json()
    files, left = _bounded(doc.get("files") or [])
    plan_files = ((doc.get("plan") or {}).get("files")) or []
    if doc.get("plan"):
        doc["plan"] = {**doc["plan"], "files": plan_files[:FILES_MAX]}
    doc.update(files=files, files_left_out=left)
    listed = [[f.path, f.bytes, f.status] for f in rep.files]
    if rep.plan is not None:
        listed += [[f.path, f.bytes] for f in rep.plan.files]
    facts = {"result": rep.result, "reason": rep.reason, "files": digest(listed), "ok": rep.ok}
    what = f"mirror {shown(rep.src)} to {shown(rep.dst)}: {rep.result}, {rep.bytes_src} bytes"
    return Planned(sh, rep.ok, doc, facts, what, () if rep.ok else (rep.reason or rep.result,), rep)


def _run_file(path: str) -> str | None:
    """The sha256 of the RUN.toml as it is now (None when it cannot be read)."""
    try:
        return hashlib.sha256(read_file(path, 2**20)).hexdigest()
    except OSError:
        return None


async def _launch(fleet: Fleet, args: dict[str, Any]) -> Planned:
    host = fleet.host(str(args["host"]))
    run_toml = str(args["run_toml"])
    after = args.get("after") or None
    resume, force = bool(args.get("resume")), bool(args.get("force"))
    async with HostLink(host) as link:
        pre = await preflight(link, run_toml, after=after, force=force, resume=resume)
    refusal = pre.refusal
    doc = {
        "host": pre.host,
        "run_path": pre.run_path,
        "after": pre.after,
        "ok": pre.ok,
        "preflight": [{"name": c.name, "ok": c.ok, "message": c.message} for c in pre.checks],
        "missing": list(pre.missing),
    }
    facts = {
        "run_toml_sha256": _run_file(run_toml),
        "run_path": pre.run_path,
        "checks": [[c.name, c.ok] for c in pre.checks],
        "ok": pre.ok,
    }
    what = f"launch {shown(pre.run_path)} on {host.name}" + (
        f" after {shown(after)}" if after else ""
    )
    codes = () if pre.ok or refusal is None else (refusal.name,)
    return Planned(host.name, pre.ok, doc, facts, what, codes, pre)


def schedule_facts(s: Schedule) -> dict[str, Any]:
    """What identifies a listed entry: a removal stands only for the entry as it was listed."""
    return {
        "id": s.id,
        "kind": s.kind,
        "user": s.user,
        "spec": s.spec,
        "command": s.command,
        "source": s.source,
        "raw": s.raw,
        "pid": s.pid,
        "start_time": s.start_time,
    }


async def find_schedule(fleet: Fleet, host: str, sid: str) -> Schedule:
    """The entry `sid` on `host` in a fresh listing; PlanRefused when the host does not answer
    or lists no such entry."""
    snap = await poll_fleet(fleet, [host])
    hs = snap.hosts[0]
    if not hs.reachable:
        raise PlanRefused("host-unreachable", f"{host} is unreachable: {hs.error}")
    found = next((s for s in hs.schedules if s.id == sid), None)
    if found is None:
        raise PlanRefused(
            "not-found", f"no schedule with id {shown(sid)} on {host} in a fresh listing"
        )
    return found


async def _remove(fleet: Fleet, args: dict[str, Any]) -> Planned:
    host = fleet.host(str(args["host"]))
    sched = await find_schedule(fleet, host.name, str(args["id"]))
    async with HostLink(host) as link:
        check = await check_removal(link, sched)
    doc = {
        "host": host.name,
        "schedule": schedule_facts(sched),
        "ok": check.ok,
        "reason_code": check.reason_code,
        "message": check.message,
        "warning": check.warning,
        "children": list(check.children)[:FILES_MAX],
    }
    facts = {
        "schedule": digest(schedule_facts(sched)),
        "file": check.sha256,
        # not the loop's children: a loop's `sleep 1` is a new process every second
        "ok": check.ok,
    }
    what = f"remove {sched.kind} {shown(sched.id)} on {host.name}: {shown(sched.command)[:80]}"
    codes = () if check.ok else (check.reason_code or "refused",)
    return Planned(host.name, check.ok, doc, facts, what, codes, (sched, check))


PLANNERS = {"purge": _purge, "mirror": _mirror, "launch": _launch, "remove-schedule": _remove}


async def make_plan(fleet: Fleet, kind: str, args: dict[str, Any]) -> Planned:
    """The plan of one proposed action, made now; nothing changes on any host. ConfigError for
    an unknown host, PlanRefused for arguments no plan can be made from, HostError when a host
    cannot be asked."""
    try:
        planner = PLANNERS[kind]
    except KeyError:
        raise PlanRefused("bad-kind", f"no action {kind!r}") from None
    return await planner(fleet, args)


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The names of the facts that differ between two plans of the same proposal."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


#: what each fact means, for the sentence that says why a proposal no longer stands
FACT_WORDS = {
    "paths": "a path's identity, size or verdict",
    "verdict": "a path's verdict",
    "keepers": "a kept adapter file (its sha256, size or modification time)",
    "keep": "the checkpoints the keep rule keeps",
    "checkpoints": "the checkpoints of a run the purge touches (a newer one was saved?)",
    "ok": "whether every check passes",
    "result": "what the mirror would do",
    "reason": "why the mirror would be refused",
    "files": "the files on one side",
    "run_toml_sha256": "the RUN.toml file",
    "run_path": "the run's output folder",
    "checks": "the pre-flight checks",
    "schedule": "the listed entry",
    "file": "the crontab or cron file that holds it",
}


def changed_sentence(keys: list[str]) -> str:
    """One sentence naming what moved between the proposal and now."""
    said = "; ".join(FACT_WORDS.get(k, k) for k in keys)
    return f"the facts changed since it was proposed ({said}); nothing was done, propose it again"


@dataclass(frozen=True)
class Rejudged:
    """A proposal judged again now: `planned` the plan made now (None when none could be
    made); `code` and `message` say why it no longer stands (None when it stands); `final`
    says whether that ends the proposal (`facts-changed`, `refused-now`, `expired`, `settled`)
    or may pass (a host that did not answer)."""

    planned: Planned | None
    code: str | None = None
    message: str | None = None
    final: bool = False

    @property
    def ok(self) -> bool:
        """True when the proposal still stands and may go to its confirmation."""
        return self.code is None and self.planned is not None


async def rejudge(fleet: Fleet, p: Proposal, now: float) -> Rejudged:
    """Make `p`'s plan again on the host now and judge it against what was proposed: it stands
    only when it is still pending, every check passes and every fact is as it was."""
    state = p.state_at(now)
    if state == "expired":
        return Rejudged(None, "expired", f"proposal {p.id} expired unconfirmed", final=True)
    if state != "pending":
        return Rejudged(None, "settled", f"proposal {p.id} is already {state}")
    try:
        planned = await make_plan(fleet, p.kind, p.args)
    except PlanRefused as e:
        return Rejudged(None, e.code, e.message, final=e.code == "not-found")
    except (ConfigError, HostError) as e:
        return Rejudged(None, getattr(e, "code", "config"), getattr(e, "message", str(e)))
    moved = changed(p.facts, planned.facts)
    if not planned.ok:
        why = ", ".join(planned.refused) or "a check failed"
        msg = f"the checks refuse it now ({why})"
        if moved:
            msg += "; " + changed_sentence(moved)
        return Rejudged(planned, "refused-now", msg + "; nothing was done", final=True)
    if moved:
        return Rejudged(planned, "facts-changed", changed_sentence(moved), final=True)
    return Rejudged(planned)
