"""The facts the purge helper gathered on the host, judged into a `PurgePlan`: pure (same
facts, same plan), the verdict of each path from `host/purge/verdict.evaluate`, the keepers,
the keep rule and the runs' eval losses (`purge.py` asks the host; `purge_plan.py` holds the
types)."""

from __future__ import annotations

from typing import Any

from fleetdeck.backend.actions.purge.plan import (
    Keeper,
    KeepRule,
    PathPlan,
    PurgePlan,
    Refusal,
    RunEvals,
)
from fleetdeck.backend.host.purge.verdict import evaluate
from fleetdeck.backend.host.purge.wire import Facts


def free_total(paths: list[dict[str, Any]]) -> int | None:
    """Free bytes summed over the distinct filesystems the paths live on."""
    per_dev: dict[int, int] = {}
    for p in paths:
        if p.get("free_bytes") is not None and p.get("pins"):
            per_dev.setdefault(p["pins"][-1][0], p["free_bytes"])
    return sum(per_dev.values()) if per_dev else None


def judge_checks(
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
        ambiguous=tuple(
            (int(s), tuple(str(p) for p in ps)) for s, ps in rule.get("ambiguous") or []
        ),
    )


def _loss(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _evals(facts: Facts) -> tuple[RunEvals, ...]:
    return tuple(
        RunEvals(
            run=str(e["run"]),
            checkpoints=tuple((int(s), str(p), _loss(v)) for s, p, v in e["checkpoints"]),
            best=e.get("best"),
            best_loss=_loss(e.get("best_loss")),
            best_kept=e.get("best_kept"),
            trainer_best=e.get("trainer_best") if isinstance(e.get("trainer_best"), str) else None,
        )
        for e in facts.get("evals") or []
    )


def plan_purge(host: str, facts: Facts, allow_best: tuple[str, ...] = ()) -> PurgePlan:
    """Judge the facts the helper gathered (pure: same facts, same plan). `allow_best`: the
    best-eval checkpoints the operator typed back to delete anyway."""
    facts = {**facts, "allow_best": list(allow_best)}
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
                checks=judge_checks(v["checks"]),
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
        free_bytes_before=free_total(facts["paths"]),
        expected_bytes=sum(p.expected_bytes for p in paths),
        warnings=tuple(dict.fromkeys(verdict["warnings"])),
        keep=_keep_rule(facts.get("keep")),
        evals=_evals(facts),
        allow_best=tuple(allow_best),
    )
