"""Purge checkpoint folders: plan (facts gathered on the host, judged purely), confirm, execute,
verify, audit.

`gather_purge` runs the stdlib helper in `host/purge/main.py` once on the host for every path
and returns a frozen `PurgePlan` (judged in `purge_judge.py`); `confirmations_match` (in
`purge_confirm.py`) says whether each path was typed back byte for byte; `execute_purge` runs
the helper again, which re-checks everything and the pins of the plan before deleting anything,
and returns a frozen `PurgeReport` whose `to_json()` is the contract's purge document. Every
purge, refused or done, is written to the audit log: intent before the helper deletes, the
result after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.audit_records import write
from fleetdeck.backend.actions.fronts import purge_check, purge_execute
from fleetdeck.backend.actions.purge.confirm import confirmations_match
from fleetdeck.backend.actions.purge.judge import plan_purge
from fleetdeck.backend.actions.purge.plan import PurgePlan, PurgeReport
from fleetdeck.backend.actions.purge.report import (
    audit_failed,
    audited_report,
    purge_record,
    refused_report,
    report_from,
)
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.purge import main as purge_helper
from fleetdeck.backend.host.purge.wire import CheckRequest, ExecuteRequest

HELPER = purge_helper.__name__
A = TypeVar("A")


async def _ask(link: HostLink, front: Callable[..., Awaitable[A]], req: Any, at_least: float) -> A:
    """One request to the purge helper through its front (bounded by the host's
    command_timeout, or `at_least` seconds if longer); its answer, or HostError naming the
    helper's refusal."""
    try:
        return await front(link, req, within=max(link.host.command_timeout, at_least))
    except HelperError as e:
        if not isinstance(e.answer, dict):
            raise HostError(
                link.name, "the purge helper gave an answer that is not a JSON object", "helper"
            ) from None
        raise HostError(
            link.name,
            f"the purge helper refused: {e.error.get('message', 'no reason given')} "
            f"[{e.error.get('code', '?')}]",
            "helper",
        ) from None


async def gather_purge(
    link: HostLink, paths: list[str], allow_best: tuple[str, ...] = ()
) -> PurgePlan:
    """Gather every fact on the link's host in one helper call and judge it; HostError if the
    host cannot be asked. Paths travel as JSON on stdin, never in a command line."""
    req: CheckRequest = {"paths": list(paths), "roots": list(link.host.roots_for_purge)}
    facts = await _ask(link, purge_check, req, 900)
    return plan_purge(link.name, facts, allow_best)


async def gather_keep_newest(
    link: HostLink, run: str, n: int, allow_best: tuple[str, ...] = ()
) -> PurgePlan:
    """The plan of the keep rule: RUN (taken literally) keeps its newest `n` checkpoints (by
    step) as keepers, every file of them hashed now and again after; each older checkpoint is
    a path checked as any purged path is. For a run that has no final adapter (a live or an
    abandoned one). HostError if the host cannot be asked."""
    req: CheckRequest = {"keep": {"run": run, "n": n}, "roots": list(link.host.roots_for_purge)}
    facts = await _ask(link, purge_check, req, 900)
    if "keep" not in facts:
        raise HostError(
            link.name, "the purge helper gave facts without the keep rule", "bad-answer"
        )
    return plan_purge(link.name, facts, allow_best)


def audit_dry_run(plan: PurgePlan) -> str | None:
    """Record a dry run: what was checked and what would have been refused. The sentence
    saying why the record could not be written, or None."""
    try:
        write(purge_record(plan, "dry-run"))
    except audit.AuditError as e:
        return e.message
    return None


async def execute_purge(
    link: HostLink, plan: PurgePlan, confirmations: dict[str, str], *, via: str = "dashboard"
) -> PurgeReport:
    """Delete the plan's paths if, and only if, every path passed, every confirmation matched,
    the `started` record is on disk, and on the host every check still passes with the same
    pins; then verify the keepers.

    Nothing is deleted when any path fails, or when the `started` record cannot be written
    (every path is then refused `not-audited`). A result record that cannot be written sets
    `audit_error` on the report. HostError (audited as failed) if the host cannot be asked.
    """
    typed = dict(confirmations)
    if not plan.ok or not confirmations_match(plan, typed):
        return audited_report(refused_report(plan, typed), plan, "refused", typed, via)
    try:
        write(purge_record(plan, "started", None, typed, via))
    except audit.AuditError as e:
        return refused_report(plan, typed, audit_error=e.message)
    payload: ExecuteRequest = {
        "paths": [p.path for p in plan.paths],
        "roots": list(link.host.roots_for_purge),
        "plan": {
            "pins": [[list(x) for x in p.pins] for p in plan.paths],
            "keepers": [
                {
                    "path": k.path,
                    "dev": k.signature[0],
                    "ino": k.signature[1],
                    "bytes": k.signature[2],
                    "mtime_ns": k.signature[3],
                }
                for k in plan.keepers
            ],
        },
    }
    if plan.keep is not None:
        payload["keep"] = {"run": plan.keep.resolved, "kept": list(plan.keep.kept)}
    if plan.allow_best:
        payload["allow_best"] = list(plan.allow_best)
    try:
        out = await _ask(link, purge_execute, payload, 3600)
        report = report_from(plan, out, typed)
    except HostError as e:
        audit_failed(plan, typed, via, e.message)
        raise
    except (KeyError, TypeError, ValueError) as e:
        msg = f"the purge helper gave an unreadable answer ({e}); check the host by hand"
        audit_failed(plan, typed, via, msg)
        raise HostError(plan.host, msg, "helper") from None
    result = (
        "done"
        if report.ok
        else "unverified"
        if report.deleted
        else "failed"
        if out["attempted"]
        else "refused"
    )
    return audited_report(report, plan, result, typed, via)
