"""Purge checkpoint folders: plan (facts gathered on the host, judged purely), confirm, execute,
verify, audit.

`gather_purge` runs the stdlib helper in `host/purge/main.py` once on the host for every path and
returns a frozen `PurgePlan`; `confirmations_match` says whether each path was typed back byte
for byte; `execute_purge` runs the helper again, which re-checks everything and the pins of
the plan before deleting anything, and returns a frozen `PurgeReport` whose `to_json()` is the
contract's purge document. Every purge, refused or done, is written to the audit log: intent
before the helper deletes, the result after.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.purge_plan import (
    Keeper,
    KeeperResult,
    KeepRule,
    PathPlan,
    PathResult,
    PurgePlan,
    PurgeReport,
    Refusal,
    RunEvals,
)
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge import main as purge_helper
from fleetdeck.backend.host.purge.verdict import evaluate

HELPER = purge_helper.__name__
CONTROLLER_CODES = ("not-confirmed", "changed-since-check", "not-audited")

__all__ = [
    "Refusal",
    "PathPlan",
    "Keeper",
    "KeepRule",
    "PurgePlan",
    "PathResult",
    "KeeperResult",
    "PurgeReport",
    "plan_purge",
    "gather_purge",
    "gather_keep_newest",
    "confirmations_match",
    "execute_purge",
    "shown",
    "HostError",
]


def _free_total(paths: list[dict[str, Any]]) -> int | None:
    """Free bytes summed over the distinct filesystems the paths live on."""
    per_dev: dict[int, int] = {}
    for p in paths:
        if p.get("free_bytes") is not None and p.get("pins"):
            per_dev.setdefault(p["pins"][-1][0], p["free_bytes"])
    return sum(per_dev.values()) if per_dev else None


def _checks(
    checks: dict[str, str], extra: dict[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    merged = dict(checks)
    merged.update(extra or {})
    return tuple(merged.items())


def _keep_rule(rule: dict[str, Any] | None) -> KeepRule | None:
    if rule is None:
        return None
    err = rule.get("error")
    given = rule.get("given")
    return KeepRule(
        run=given if isinstance(given, str) else rule.get("run") or "",
        n=rule["n"],
        resolved=rule.get("run"),
        checkpoints=tuple((int(s), str(p)) for s, p in rule.get("checkpoints") or []),
        kept=tuple(rule.get("kept") or ()),
        refusal=Refusal(err[0], err[1]) if err else None,
        incomplete=tuple((int(s), str(p), str(w)) for s, p, w in rule.get("incomplete") or []),
        ignored=tuple((str(p), str(w)) for p, w in rule.get("ignored") or []),
    )


def _loss(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _evals(facts: dict[str, Any]) -> tuple[RunEvals, ...]:
    return tuple(
        RunEvals(
            run=str(e["run"]),
            checkpoints=tuple((int(s), str(p), _loss(v)) for s, p, v in e["checkpoints"]),
            best=e.get("best"),
            best_loss=_loss(e.get("best_loss")),
            best_kept=e.get("best_kept"),
        )
        for e in facts.get("evals") or []
    )


def plan_purge(host: str, facts: dict[str, Any], allow_best: tuple[str, ...] = ()) -> PurgePlan:
    """Judge the facts the helper gathered (pure: same facts, same plan). `allow_best`: the
    best-eval checkpoints the operator typed back to delete anyway."""
    facts = dict(facts, allow_best=list(allow_best))
    verdict = evaluate(facts)
    paths = []
    for p, v in zip(facts["paths"], verdict["paths"], strict=True):
        paths.append(
            PathPlan(
                path=p["path"],
                resolved=p["abs"],
                bytes=p["bytes"],
                expected_bytes=p["disk_bytes"],
                refusals=tuple(Refusal(c, m) for c, m in v["refusals"]),
                checks=_checks(v["checks"]),
                pins=tuple(tuple(x) for x in p["pins"]),
                free_bytes=p["free_bytes"],
                fstype=p["fstype"],
                runs=tuple(p["runs"]),
            )
        )
    keepers = tuple(
        Keeper(
            path=f["path"],
            run=k["run"],
            bytes=f["bytes"],
            sha256_before=f["sha256"],
            signature=(f["dev"], f["ino"], f["bytes"], f["mtime_ns"]),
        )
        for k in facts["keepers"]
        if not k["error"]
        for f in k["files"]
    )
    return PurgePlan(
        host=host,
        paths=tuple(paths),
        keepers=keepers,
        roots=tuple((r["given"], r["resolved"]) for r in facts["roots"]),
        free_bytes_before=_free_total(facts["paths"]),
        expected_bytes=sum(p.expected_bytes for p in paths),
        warnings=tuple(dict.fromkeys(verdict["warnings"])),
        keep=_keep_rule(facts.get("keep")),
        evals=_evals(facts),
        allow_best=tuple(allow_best),
    )


async def _ask(link: HostLink, op: str, at_least: float, **fields: Any) -> dict[str, Any]:
    """One request to the purge helper (bounded by the host's command_timeout, or `at_least`
    seconds if longer); its answer, or HostError naming the helper's refusal."""
    try:
        return await link.call(
            HELPER, op, within=max(link.host.command_timeout, at_least), **fields
        )
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
    facts = await _ask(link, "check", 900, paths=list(paths), roots=list(link.host.roots_for_purge))
    if "paths" not in facts:
        raise HostError(link.name, "the purge helper gave an answer without facts", "helper")
    return plan_purge(link.name, facts, allow_best)


async def gather_keep_newest(
    link: HostLink, run: str, n: int, allow_best: tuple[str, ...] = ()
) -> PurgePlan:
    """The plan of the keep rule: RUN (taken literally) keeps its newest `n` checkpoints (by
    step) as keepers, every file of them hashed now and again after; each older checkpoint is
    a path checked as any purged path is. For a run that has no final adapter (a live or an
    abandoned one). HostError if the host cannot be asked."""
    facts = await _ask(
        link, "check", 900, keep={"run": run, "n": n}, roots=list(link.host.roots_for_purge)
    )
    if "paths" not in facts or not isinstance(facts.get("keep"), dict):
        raise HostError(link.name, "the purge helper gave an answer without facts", "helper")
    return plan_purge(link.name, facts, allow_best)


def confirmations_match(plan: PurgePlan, typed: dict[str, str]) -> bool:
    """True when every path of the plan (under the keep rule: the run's path) was typed back
    exactly, byte for byte."""
    return bool(plan.paths) and all(_confirmed(t, typed) for t in plan.confirm_texts())


def _path_confirmed(plan: PurgePlan, path: str, typed: dict[str, str]) -> bool:
    return _confirmed(plan.keep.run if plan.keep is not None else path, typed)


def _confirmed(path: str, typed: dict[str, str]) -> bool:
    given = typed.get(path)
    return isinstance(given, str) and given.encode("utf-8", "surrogateescape") == path.encode(
        "utf-8", "surrogateescape"
    )


def _not_confirmed(path: str, typed: dict[str, str]) -> Refusal:
    if typed.get(path) is None:
        return Refusal(
            "not-confirmed",
            "no confirmation was given for it (type the path exactly, or pass --confirm PATH)",
        )
    return Refusal(
        "not-confirmed",
        f"the confirmation did not match: typed {shown(typed[path])}, the path is {shown(path)}",
    )


def _typed(path: str, typed: dict[str, str]) -> str | None:
    v = typed.get(path)
    return v if isinstance(v, str) else None


def _record(
    plan: PurgePlan,
    report: PurgeReport | None = None,
    typed: dict[str, str] | None = None,
    via: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
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
    return {
        "paths": paths,
        "keepers": [
            {
                "path": k.path,
                "run": k.run,
                "bytes": k.bytes,
                "sha256_before": k.sha256_before,
                "sha256_after": after.get(k.path),
            }
            for k in plan.keepers
        ],
        "confirmation": None
        if typed is None
        else {
            "via": via,
            "paths": [
                {"path": t, "typed": _typed(t, typed), "matched": _confirmed(t, typed)}
                for t in plan.confirm_texts()
            ],
        },
        "keep_newest": plan.keep.to_json() if plan.keep is not None else None,
        "witnesses": plan.witnesses,
        "allow_best": list(plan.allow_best),
        "evals": [e.to_json() for e in plan.evals],
        "bytes": sum(p.bytes for p in plan.paths),
        "expected_bytes": plan.expected_bytes,
        "free_bytes_before": report.free_bytes_before if report else plan.free_bytes_before,
        "free_bytes_after": report.free_bytes_after if report else None,
        "reclaimed_bytes": report.reclaimed_bytes if report else None,
        "warnings": list(report.warnings if report else plan.warnings),
        "error": error,
    }


def audit_dry_run(plan: PurgePlan) -> str | None:
    """Record a dry run: what was checked and what would have been refused. The sentence
    saying why the record could not be written, or None."""
    try:
        audit.audit("purge", plan.host, "dry-run", **_record(plan))
    except audit.AuditError as e:
        return e.message
    return None


def _refused_report(
    plan: PurgePlan, typed: dict[str, str], audit_error: str | None = None
) -> PurgeReport:
    results = []
    for p in plan.paths:
        refusals = p.refusals
        extra = {"not-confirmed": "pass" if _path_confirmed(plan, p.path, typed) else "fail"}
        if extra["not-confirmed"] == "fail":
            refusals = (*refusals, _not_confirmed(plan.keep.run if plan.keep else p.path, typed))
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
                _checks(dict(p.checks), extra),
                typed=_typed(plan.keep.run if plan.keep else p.path, typed),
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


def _audited(
    report: PurgeReport,
    plan: PurgePlan,
    result: str,
    typed: dict[str, str],
    via: str,
    error: str | None = None,
) -> PurgeReport:
    """Write the result record; a record that cannot be written is carried on the report."""
    try:
        audit.audit("purge", plan.host, result, **_record(plan, report, typed, via, error))
    except audit.AuditError as e:
        return replace(report, audit_error=e.message)
    return report


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
        return _audited(_refused_report(plan, typed), plan, "refused", typed, via)
    try:
        audit.audit("purge", plan.host, "started", **_record(plan, None, typed, via))
    except audit.AuditError as e:
        return _refused_report(plan, typed, audit_error=e.message)
    payload = {
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
        out = await _ask(link, "execute", 3600, **payload)
        report = _report_from(plan, out, typed)
    except HostError as e:
        _failed(plan, typed, via, e.message)
        raise
    except (KeyError, TypeError, ValueError) as e:
        msg = f"the purge helper gave an unreadable answer ({e}); check the host by hand"
        _failed(plan, typed, via, msg)
        raise HostError(plan.host, msg, "helper") from None
    result = (
        "done"
        if report.ok
        else "unverified"
        if report.deleted
        else "failed"
        if out.get("attempted")
        else "refused"
    )
    return _audited(report, plan, result, typed, via)


def _failed(plan: PurgePlan, typed: dict[str, str], via: str, error: str) -> None:
    try:
        audit.audit("purge", plan.host, "failed", **_record(plan, None, typed, via, error))
    except audit.AuditError as e:
        raise HostError(plan.host, f"{error}; and {e.message}", "audit") from None


def _report_from(plan: PurgePlan, out: dict[str, Any], typed: dict[str, str]) -> PurgeReport:
    """Turn the execute helper's answer into a report (refusals found again, pins moved,
    per-path results, keeper hashes after)."""
    facts, verdict = out["facts"], out["verdict"]
    results = out.get("results") or []
    after = out.get("sha256_after") or {}
    paths = []
    free_after: dict[int, int] = {}
    for n, p in enumerate(plan.paths):
        v = verdict["paths"][n]
        refusals = [Refusal(c, m) for c, m in v["refusals"]]
        moved = out["changed"][n]
        r = results[n] if n < len(results) else {}
        if r.get("changed"):
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
        if r.get("free_bytes_after") is not None and p.pins:
            free_after[p.pins[-1][0]] = r["free_bytes_after"]
        paths.append(
            PathResult(
                p.path,
                p.resolved,
                p.bytes,
                bool(r.get("deleted")),
                tuple(refusals),
                _checks(v["checks"], extra),
                r.get("error"),
                _typed(plan.keep.run if plan.keep else p.path, typed),
            )
        )
    before = _free_total(facts["paths"])
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
