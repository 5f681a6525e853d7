"""What a purge reports and records: the one audit record shape of a purge, the report of a
refused purge, the report turned from the execute helper's answer, and the result records
written to the audit log (`purge.py` gathers and executes)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.audit_records import PurgeRecord, write
from fleetdeck.backend.actions.purge.confirm import (
    confirmations_match,
    not_confirmed,
    path_confirmed,
    typed_for,
    typed_matches,
)
from fleetdeck.backend.actions.purge.judge import free_total, judge_checks
from fleetdeck.backend.actions.purge.plan import (
    KeeperResult,
    PathResult,
    PurgePlan,
    PurgeReport,
    Refusal,
)
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.host.purge.wire import Executed


def purge_record(
    plan: PurgePlan,
    result: str,
    report: PurgeReport | None = None,
    typed: dict[str, str] | None = None,
    via: str | None = None,
    error: str | None = None,
) -> PurgeRecord:
    """The one audit record shape of a purge, whatever its result: every path with its size,
    checks, refusals and fate; the keepers with their hashes; what was typed; free space.
    Paths are kept exact (the log is ASCII JSON); readers escape them with `shown`."""
    results = report.paths if report is not None else (None,) * len(plan.paths)
    after = {k.path: k.sha256_after for k in report.keepers} if report is not None else {}
    paths = []
    for p, r in zip(plan.paths, results, strict=True):
        paths.append(
            {
                "path": p.path,
                "resolved": p.resolved,
                "bytes": p.bytes,
                "expected_bytes": p.expected_bytes,
                "deleted": bool(r and r.deleted),
                "refusals": [x.to_json() for x in (r.refusals if r else p.refusals)],
                "checks": dict(r.checks if r else p.checks),
                "error": r.error if r else None,
            }
        )
    return PurgeRecord(
        host=plan.host,
        result=result,
        paths=paths,
        keepers=[
            {
                "path": k.path,
                "run": k.run,
                "bytes": k.bytes,
                "sha256_before": k.sha256_before,
                "sha256_after": after.get(k.path),
            }
            for k in plan.keepers
        ],
        confirmation=None
        if typed is None
        else {
            "via": via,
            "paths": [
                {"path": t, "typed": typed_for(t, typed), "matched": typed_matches(t, typed)}
                for t in plan.confirm_texts()
            ],
        },
        keep_newest=plan.keep.to_json() if plan.keep is not None else None,
        witnesses=plan.witnesses,
        allow_best=list(plan.allow_best),
        evals=[e.to_json() for e in plan.evals],
        bytes=sum(p.bytes for p in plan.paths),
        expected_bytes=plan.expected_bytes,
        free_bytes_before=report.free_bytes_before if report else plan.free_bytes_before,
        free_bytes_after=report.free_bytes_after if report else None,
        reclaimed_bytes=report.reclaimed_bytes if report else None,
        warnings=list(report.warnings if report else plan.warnings),
        error=error,
    )


def refused_report(
    plan: PurgePlan, typed: dict[str, str], audit_error: str | None = None
) -> PurgeReport:
    results = []
    for p in plan.paths:
        refusals = p.refusals
        extra = {"not-confirmed": "pass" if path_confirmed(plan, p.path, typed) else "fail"}
        if extra["not-confirmed"] == "fail":
            refusals = (*refusals, not_confirmed(plan.keep.run if plan.keep else p.path, typed))
        if audit_error:
            refusals = (
                *refusals,
                Refusal(
                    "not-audited",
                    f"{audit_error}; nothing was touched, because no "
                    "purge goes ahead without its audit record",
                ),
            )
            extra["not-audited"] = "fail"
        results.append(
            PathResult(
                p.path,
                p.resolved,
                p.bytes,
                False,
                refusals,
                judge_checks(dict(p.checks), extra),
                typed=typed_for(plan.keep.run if plan.keep else p.path, typed),
            )
        )
    return PurgeReport(
        host=plan.host,
        deleted=False,
        paths=tuple(results),
        keepers=tuple(KeeperResult(k.path, k.run, k.sha256_before, None) for k in plan.keepers),
        free_bytes_before=plan.free_bytes_before,
        free_bytes_after=plan.free_bytes_before,
        expected_bytes=plan.expected_bytes,
        warnings=plan.warnings,
        confirmed=confirmations_match(plan, typed),
        audit_error=audit_error,
        keep=plan.keep,
    )


def audited_report(
    report: PurgeReport,
    plan: PurgePlan,
    result: str,
    typed: dict[str, str],
    via: str,
    error: str | None = None,
) -> PurgeReport:
    """Write the result record; a record that cannot be written is carried on the report."""
    try:
        write(purge_record(plan, result, report, typed, via, error))
    except audit.AuditError as e:
        return replace(report, audit_error=e.message)
    return report


def audit_failed(plan: PurgePlan, typed: dict[str, str], via: str, error: str) -> None:
    try:
        write(purge_record(plan, "failed", None, typed, via, error))
    except audit.AuditError as e:
        raise HostError(plan.host, f"{error}; and {e.message}", "audit") from None


def report_from(plan: PurgePlan, out: Executed, typed: dict[str, str]) -> PurgeReport:
    """Turn the execute helper's answer into a report (refusals found again, pins moved,
    per-path results, keeper hashes after)."""
    facts, verdict = out["facts"], out["verdict"]
    results = out["results"]
    after = out.get("sha256_after") or {}
    paths = []
    free_after: dict[int, int] = {}
    for n, p in enumerate(plan.paths):
        v = verdict["paths"][n]
        refusals = [Refusal(c, m) for c, m in v["refusals"]]
        moved = out["changed"][n]
        r = results[n] if n < len(results) else None
        if r is not None and r["changed"]:
            moved = r["changed"]
        extra = {"not-confirmed": "pass", "changed-since-check": "fail" if moved else "pass"}
        if moved:
            refusals.insert(
                0,
                Refusal(
                    "changed-since-check",
                    f"it changed since it was checked: {moved}; nothing further was deleted",
                ),
            )
        free = r["free_bytes_after"] if r is not None else None
        if free is not None and p.pins:
            free_after[p.pins[-1][0]] = free
        paths.append(
            PathResult(
                p.path,
                p.resolved,
                p.bytes,
                r is not None and r["deleted"],
                tuple(refusals),
                judge_checks(v["checks"], extra),
                r["error"] if r is not None else None,
                typed_for(plan.keep.run if plan.keep else p.path, typed),
            )
        )
    before = free_total(facts["paths"])
    if before is not None:
        per_dev: dict[Any, Any] = {}
        for fp in facts["paths"]:
            if fp.get("free_bytes") is not None and fp.get("pins"):
                per_dev.setdefault(fp["pins"][-1][0], fp["free_bytes"])
        per_dev.update({d: b for d, b in free_after.items() if d in per_dev})
        free_bytes_after: int | None = sum(per_dev.values())
    else:
        free_bytes_after = None
    keepers = tuple(
        KeeperResult(k.path, k.run, k.sha256_before, after.get(k.path)) for k in plan.keepers
    )
    return PurgeReport(
        host=plan.host,
        deleted=bool(results) and all(p.deleted for p in paths),
        paths=tuple(paths),
        keepers=keepers,
        free_bytes_before=before,
        free_bytes_after=free_bytes_after,
        expected_bytes=plan.expected_bytes,
        warnings=tuple(dict.fromkeys((*plan.warnings, *verdict["warnings"]))),
        confirmed=True,
        keep=plan.keep,
    )
