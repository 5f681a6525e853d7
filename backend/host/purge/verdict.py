"""Purge's verdict: gathered facts judged (pure), so the controller and the host judge with
the same code: per path its refusals and checks, and warnings for the whole purge.

Each refusal code is one small function below, `_refuse_<code>(judge, n, path)`, which returns
that refusal `[code, sentence]` or None; `evaluate` folds them over every path in `PATH_CHECKS`
order, which is `CHECKS` order save that a scan's `unreadable` (a walk code) is reported after
`overlapping`, as it always was. A path the walk refused gets that refusal alone, and a path
outside every root stops after the root checks: the checks that read its contents were not
made."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

from fleetdeck.backend.host.lib import fsinfo, layout
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.paths import WALK_CODES

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

    from fleetdeck.backend.host.purge.wire import Facts, Verdict

CHECKS = WALK_CODES + (
    "overlapping",
    "outside-roots",
    "is-root",
    "holds-final-adapter",
    "in-use",
    "container-mount",
    "container-unknown",
    "mounted",
    "no-keeper",
    "no-witness",
    "best-eval",
)
_HOW = {"fd": "has open", "maps": "maps", "cwd": "has its cwd in", "root": "has its root in"}


def _below_root(abs_path: str, roots: Iterable[str]) -> List[str]:
    top = next((r for r in roots if fsinfo.under(abs_path, r)), "/")
    return [c for c in abs_path[len(top.rstrip("/")) :].split("/") if c]


def _is_final_adapter(abs_path: str, roots: Iterable[str], holds_weights: bool = False) -> bool:
    """True when abs_path is or lies in a run's final adapter: an `adapter` component below the
    purge root, or (`holds_weights`) a folder holding the weights, with no checkpoint component
    before it."""
    for c in _below_root(abs_path, roots):
        if c == "checkpoints" or layout.checkpoint_step(c) is not None:
            return False
        if c == layout.ADAPTER_DIR:
            return True
    return holds_weights


class _Judge:
    """What every path is judged against: the facts and what is read from them once."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.roots = [r["resolved"] for r in facts["roots"] if not r.get("refused")]
        self.keepers = {k["run"]: k for k in facts["keepers"]}
        self.docker = facts.get("docker") or {"state": "absent"}
        self.blind = [u for u in facts["proc_unreadable"] if not u["ancestor"]]


# -- one function per refusal code --------------------------------------------------------------
def _refuse_walk(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    """Any walk code (`not-found`, `symlink`, ...): the path could not be walked safely."""
    return p["error"] or None


def _refuse_overlapping(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    a = p["abs"]
    other = next(
        (
            q["abs"]
            for m, q in enumerate(judge.facts["paths"])
            if m != n
            and q["abs"]
            and (q["abs"] == a and m < n or fsinfo.under(a, q["abs"]) and q["abs"] != a)
        ),
        None,
    )
    if other:
        return [
            "overlapping",
            "it is the same as, or lies inside, %s, also listed; list each folder "
            "once" % shown(other),
        ]
    return None


def _refuse_unreadable(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    if p["scan_error"]:
        return [
            "unreadable",
            "part of it cannot be read (%s), so it cannot be checked" % p["scan_error"],
        ]
    return None


def _refuse_outside_roots(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    a = p["abs"]
    if a in judge.roots or any(fsinfo.under(a, r) for r in judge.roots):
        return None
    return [
        "outside-roots",
        "it is outside every purge root (%s)"
        % (
            ", ".join(
                "%s -> %s%s"
                % (
                    shown(r["given"]),
                    shown(r["resolved"]),
                    " (a system folder: not used)" if r.get("refused") else "",
                )
                for r in judge.facts["roots"]
            )
            or "none set"
        ),
    ]


def _refuse_is_root(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    if p["abs"] in judge.roots:
        return ["is-root", "it is the purge root itself; only folders inside a root can be purged"]
    return None


def _refuse_holds_final_adapter(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    roots = judge.roots
    adapters = [x for x in [p["abs"]] + p["adapters"] if _is_final_adapter(x, roots)] + [
        x for x in p.get("weights_dirs", []) if _is_final_adapter(x, roots, holds_weights=True)
    ]
    if adapters:
        return [
            "holds-final-adapter",
            "it is or holds a run's final adapter (%s)" % shown(adapters[0]),
        ]
    return None


def _refuse_in_use(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    held = [h for h in judge.facts["holders"] if h["index"] == n]
    if held:
        return [
            "in-use",
            # the code says "in use"; the sentence says by whom (never "in-use: in use: ...")
            "held by "
            + "; ".join(
                "pid %d (%s) %s %s"
                % (h["pid"], shown(h["comm"]), _HOW[h["how"]], shown(h["file"] or "?"))
                for h in held[:3]
            )
            + (" and %d more" % (len(held) - 3) if len(held) > 3 else ""),
        ]
    if judge.blind:
        return [
            "in-use",
            "cannot tell whether it is in use: %d process(es) cannot be read (%s); run "
            "as a user who can read every /proc entry"
            % (len(judge.blind), shown(judge.blind[0]["error"])),
        ]
    return None


def _refuse_container_mount(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    if not p["containers"]:
        return None
    c = p["containers"][0]
    return [
        "container-mount",
        "container %s (%s) mounts %s at %s"
        % (
            shown(c["name"] or c["id"]),
            "running" if c["running"] else "stopped",
            shown(c["source"]),
            shown(c["destination"] or "?"),
        ),
    ]


def _refuse_container_unknown(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    if judge.docker["state"] in ("denied", "error"):
        return [
            "container-unknown",
            "docker is installed but could not be asked which containers "
            "mount it (%s)" % shown(judge.docker.get("error") or ""),
        ]
    return None


def _refuse_mounted(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    if p["mounts_inside"]:
        return ["mounted", "a filesystem is mounted at %s" % shown(p["mounts_inside"][0])]
    return None


def _keeper_problem(k: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why keeper `k` (None: not examined) cannot witness a purge, or None when it can."""
    if k is None or k["error"]:
        return k["error"] if k else "it was not examined"
    if k["in_purge"]:
        return (
            "%s is, or shares a file or folder (hard link, bind mount) with, what is purged"
            % shown(k["adapter"])
        )
    if not k["files"]:
        return "%s holds no file to hash before and after, so nothing would witness it" % shown(
            k["adapter"]
        )
    return None


def _refuse_no_keeper(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    """The first run losing a checkpoint here that keeps nothing safely."""
    for run in p["runs"]:
        k = judge.keepers.get(run)
        why = _keeper_problem(k)
        if why and k is not None and k.get("kind") == "checkpoints":
            return [
                "no-keeper",
                "run %s keeps its newest checkpoints (%s), but they cannot be "
                "kept safely: %s" % (shown(run), k["adapter"], why),
            ]
        if why:
            return [
                "no-keeper",
                "run %s loses a checkpoint but has no final adapter that survives "
                "it (a real folder with non-empty %s and %s): %s; --keep-newest N keeps its "
                "newest checkpoints instead" % (shown(run), layout.WEIGHTS, layout.CONFIG, why),
            ]
    return None


def _refuse_no_witness(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    if not p["runs"] and not p.get("scan_error"):
        return [
            "no-witness",
            "it holds no checkpoint of a run (no checkpoint-<step> folder in it or "
            "above it), so no kept adapter or checkpoint would be hashed before and after to "
            "witness this purge; purge deletes checkpoints",
        ]
    return None


def _refuse_best_eval(judge: _Judge, n: int, p: Dict[str, Any]) -> Optional[List[str]]:
    allowed = judge.facts.get("allow_best") or []
    for e in judge.facts.get("evals") or []:
        if e["best_kept"] is False and n in e["best_in"] and e["best"] not in allowed:
            return [
                "best-eval",
                "it holds %s, the best eval loss of run %s (%.4g), and what the run keeps "
                "is not that checkpoint (no kept checkpoint or final adapter holds the same weights); "
                "to delete it anyway, type its path back (the field below it in the dashboard; "
                "--allow-best PATH on the command line)"
                % (shown(e["best"]), shown(e["run"]), e["best_loss"]),
            ]
    return None


#: the checks of where a path is, made for every path the walk reached
WHERE_CHECKS = (_refuse_overlapping, _refuse_unreadable, _refuse_outside_roots, _refuse_is_root)
#: the checks of what a path holds and who uses it, made for every path inside a root
CONTENT_CHECKS = (
    _refuse_holds_final_adapter,
    _refuse_in_use,
    _refuse_container_mount,
    _refuse_container_unknown,
    _refuse_mounted,
    _refuse_no_keeper,
    _refuse_no_witness,
    _refuse_best_eval,
)
#: every check in the order its refusal is reported
PATH_CHECKS = (_refuse_walk,) + WHERE_CHECKS + CONTENT_CHECKS


def _fold(
    checks: Sequence[Callable[[_Judge, int, Dict[str, Any]], Optional[List[str]]]],
    judge: _Judge,
    n: int,
    p: Dict[str, Any],
) -> List[List[str]]:
    return [r for r in (check(judge, n, p) for check in checks) if r]


def judge_path(judge: _Judge, n: int, p: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """Path `n`'s refusals and checks; `checked`: whether its contents were judged."""
    walk = _refuse_walk(judge, n, p)
    if walk:
        return {"refusals": [walk], "checks": _checks([walk], skipped=True)}, False
    ref = _fold(WHERE_CHECKS, judge, n, p)
    if p.get("outside"):
        # never walked: the checks that read its contents were not made
        return {"refusals": ref, "checks": _checks(ref, skipped=True)}, False
    ref += _fold(CONTENT_CHECKS, judge, n, p)
    return {"refusals": ref, "checks": _checks(ref)}, True


# -- warnings -----------------------------------------------------------------------------------
def _purge_warnings(facts: Facts) -> List[str]:
    """What the whole purge should know before any path is judged."""
    warnings = []
    for r in facts["roots"]:
        if r.get("refused"):
            warnings.append("purge root %s is not used: %s" % (shown(r["given"]), r["refused"]))
    docker = facts.get("docker") or {"state": "absent"}
    if docker["state"] == "down":
        warnings.append(
            "docker is installed but its engine is not running (%s): no container runs "
            "now, stopped containers could not be inspected" % shown(docker.get("error"))
        )
    rule = facts.get("keep")
    if not isinstance(rule, dict):
        rule = {}
    for _step, path, why in rule.get("incomplete") or []:
        warnings.append("%s is %s; it is neither kept nor deleted" % (shown(path), why))
    for path, why in rule.get("ignored") or []:
        warnings.append(
            "%s is not counted as a checkpoint (%s); it is neither kept nor deleted"
            % (shown(path), why)
        )
    for u in facts["proc_unreadable"]:
        if u["ancestor"]:
            # it started this check and waits on it (init, sshd, the controller): reported, not counted
            warnings.append(
                "process %d (%s) cannot be read (%s); it is an ancestor of this check, so it "
                "is not counted as a user of the paths"
                % (u["pid"], shown(u["comm"]), shown(u["error"]))
            )
    return warnings


def _path_warnings(p: Dict[str, Any]) -> List[str]:
    """What a judged path holds that the purge does not refuse but should say."""
    a, warnings = p["abs"], []
    if p["symlinks"]:
        warnings.append(
            "%s holds %d symlink(s); they are removed, never followed" % (shown(a), p["symlinks"])
        )
    z = p["zfs"]
    if z and z.get("error"):
        warnings.append(
            "%s is on ZFS but snapshots could not be read (%s)" % (shown(a), shown(z["error"]))
        )
    elif z and (z.get("usedbysnapshots") or z.get("snapshots")):
        warnings.append(
            "%s is on ZFS dataset %s with %s snapshot(s) (usedbysnapshots %d bytes): blocks they "
            "reference stay allocated until the snapshots are destroyed"
            % (shown(a), shown(z["dataset"]), z.get("snapshots"), z.get("usedbysnapshots", 0))
        )
    return warnings


def _keeper_warnings(facts: Facts) -> List[str]:
    return [
        "kept file %s has %d hard links elsewhere" % (shown(f["path"]), f["nlink"])
        for k in facts["keepers"]
        for f in k["files"]
        if f["nlink"] > 1 and not k["in_purge"]
    ]


def evaluate(facts: Facts) -> Verdict:
    """Judge gathered facts (pure): per path, the refusals [[code, sentence]] and checks
    {code: pass|fail|skipped}; plus warnings for the whole purge."""
    judge = _Judge(facts)
    warnings, out = _purge_warnings(facts), []
    for n, p in enumerate(facts["paths"]):
        verdict, checked = judge_path(judge, n, p)
        out.append(verdict)
        if checked:
            warnings += _path_warnings(p)
    warnings += _keeper_warnings(facts)
    return {"paths": out, "warnings": warnings}


def _checks(ref: Sequence[Sequence[str]], skipped: bool = False) -> Dict[str, str]:
    failed = {r[0] for r in ref}
    return {c: "fail" if c in failed else ("skipped" if skipped else "pass") for c in CHECKS}
