"""A purge's typed plan and report: what the host's facts and the verdict say of each path and
keeper before (`PurgePlan`), and what the purge did (`PurgeReport`, whose `to_json()` is the
contract's purge document). Pure data: gathering and executing are in purge.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Refusal:
    """Why a path will not be deleted: a stable code and a sentence naming what and why."""

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class PathPlan:
    """One path as checked: what it resolves to, its size, its pins and its refusals."""

    path: str
    resolved: str | None
    bytes: int
    expected_bytes: int
    refusals: tuple[Refusal, ...]
    #: (check code, "pass" | "fail" | "skipped"), every check in a fixed order
    checks: tuple[tuple[str, str], ...]
    #: (st_dev, st_ino) of "/" and of each component down to the path itself
    pins: tuple[tuple[int, int], ...]
    free_bytes: int | None
    fstype: str | None
    #: runs that lose a checkpoint with this path
    runs: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when this path passed every check."""
        return not self.refusals

    @property
    def refused(self) -> list[str]:
        """The refusal codes, in check order."""
        return [r.code for r in self.refusals]


@dataclass(frozen=True)
class Keeper:
    """One file of a final adapter that must survive the purge, as it was before."""

    path: str
    run: str
    bytes: int
    sha256_before: str | None
    #: identity the execute step checks again: (st_dev, st_ino, size, mtime_ns)
    signature: tuple[int, int, int, int]


@dataclass(frozen=True)
class KeepRule:
    """A run purged by the keep rule (`--keep-newest N`): it has no final adapter, so its newest
    `n` checkpoints are the keepers and the older ones are the paths. The confirmation is the
    run's path typed back exactly."""

    #: the run as given (what is typed back)
    run: str
    n: int
    #: every checkpoint found, oldest first: (step, path)
    checkpoints: tuple[tuple[int, str], ...]
    kept: tuple[str, ...]
    #: why the rule frees nothing (no checkpoints, no more than n, a bad run path): a refusal
    refusal: Refusal | None = None
    #: the run's absolute path on the host (`~` expanded)
    resolved: str | None = None
    #: checkpoints that are not complete (a save killed half-way): (step, path, why); neither
    #: kept nor deleted
    incomplete: tuple[tuple[int, str, str], ...] = ()
    #: names that look like checkpoints but are not (a trailing newline, a step past 2**63 - 1)
    ignored: tuple[tuple[str, str], ...] = ()
    #: steps that two checkpoint folders share (`<run>/checkpoint-300` beside
    #: `<run>/checkpoints/checkpoint-300`): (step, paths); the rule refuses `ambiguous-step`
    ambiguous: tuple[tuple[int, tuple[str, ...]], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "resolved": self.resolved,
            "n": self.n,
            "kept": list(self.kept),
            "checkpoints": [[s, p] for s, p in self.checkpoints],
            "incomplete": [{"step": s, "path": p, "why": w} for s, p, w in self.incomplete],
            "ignored": [{"path": p, "why": w} for p, w in self.ignored],
            "ambiguous": [{"step": s, "paths": list(ps)} for s, ps in self.ambiguous],
            "refusal": self.refusal.to_json() if self.refusal else None,
        }


@dataclass(frozen=True)
class RunEvals:
    """A run that loses a checkpoint, with the eval loss each of its checkpoints recorded (from
    its own trainer_state.json) and its best one: `best_kept` says whether what the run keeps
    holds the best (a kept checkpoint, or a final adapter with the same weights' sha256)."""

    run: str
    #: (step, path, eval loss or None), oldest first
    checkpoints: tuple[tuple[int, str, float | None], ...]
    best: str | None
    best_loss: float | None
    best_kept: bool | None
    #: the checkpoint the run's own trainer_state.json names as `best_model_checkpoint`: the
    #: best on a tie of eval losses; named when it differs from `best`
    trainer_best: str | None = None

    def rows(self) -> list[tuple[str, int, str, bool]]:
        """(checkpoint folder name, step, eval loss as shown ("-" when none), is the best), oldest
        first: what the CLI and the dashboard print of each checkpoint."""
        return [
            (
                path.rsplit("/", 1)[-1],
                step,
                "-" if loss is None else f"{loss:.4f}",
                path == self.best,
            )
            for step, path, loss in self.checkpoints
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "best": self.best,
            "best_eval_loss": self.best_loss,
            "best_kept": self.best_kept,
            "trainer_best": self.trainer_best,
            "checkpoints": [{"step": s, "path": p, "eval_loss": v} for s, p, v in self.checkpoints],
        }


@dataclass(frozen=True)
class PurgePlan:
    """Everything checked before a purge on one host; `ok` means every path passed."""

    host: str
    paths: tuple[PathPlan, ...]
    keepers: tuple[Keeper, ...]
    roots: tuple[tuple[str, str], ...]
    free_bytes_before: int | None
    expected_bytes: int
    warnings: tuple[str, ...]
    #: set for `--keep-newest N`: the run, the rule and what it keeps
    keep: KeepRule | None = None
    #: per run that loses a checkpoint: its checkpoints' eval losses and its best
    evals: tuple[RunEvals, ...] = ()
    #: best-eval checkpoints the operator typed back to delete anyway (`--allow-best`)
    allow_best: tuple[str, ...] = ()

    @property
    def witnesses(self) -> int:
        """How many kept files are hashed before and after: what a "verified" rests on."""
        return len(self.keepers)

    @property
    def ok(self) -> bool:
        """True when there is at least one path, every path passed every check, and at least one
        kept file witnesses the purge."""
        if self.keep is not None and self.keep.refusal is not None:
            return False
        return bool(self.paths) and all(p.ok for p in self.paths) and bool(self.keepers)

    def confirm_texts(self) -> tuple[str, ...]:
        """What must be typed back: each path, or the run's path under the keep rule."""
        return (self.keep.run,) if self.keep is not None else tuple(p.path for p in self.paths)

    def to_json(self) -> dict[str, Any]:
        """The contract's purge document for a dry run (nothing deleted, nothing after)."""
        return {
            "host": self.host,
            "dry_run": True,
            "deleted": False,
            "ok": self.ok,
            "paths": [path_json(p, p.refusals, deleted=False) for p in self.paths],
            "keepers": [
                {
                    "path": k.path,
                    "run": k.run,
                    "bytes": k.bytes,
                    "sha256_before": k.sha256_before,
                    "sha256_after": None,
                }
                for k in self.keepers
            ],
            "free_bytes_before": self.free_bytes_before,
            "free_bytes_after": None,
            "expected_bytes": self.expected_bytes,
            "reclaimed_bytes": None,
            "warnings": list(self.warnings),
            "keep_newest": self.keep.to_json() if self.keep else None,
            "witnesses": self.witnesses,
            "evals": [e.to_json() for e in self.evals],
            "allow_best": list(self.allow_best),
        }


@dataclass(frozen=True)
class PathResult:
    """One path after execution: deleted or not, and why not."""

    path: str
    resolved: str | None
    bytes: int
    deleted: bool
    refusals: tuple[Refusal, ...]
    checks: tuple[tuple[str, str], ...]
    error: str | None = None
    #: what was typed to confirm it (None: nothing was)
    typed: str | None = None

    @property
    def refused(self) -> list[str]:
        """The refusal codes, in check order."""
        return [r.code for r in self.refusals]


@dataclass(frozen=True)
class KeeperResult:
    """A kept adapter file, hashed before and after."""

    path: str
    run: str
    sha256_before: str | None
    sha256_after: str | None

    @property
    def verified(self) -> bool:
        """True when the file is still there with the same sha256."""
        return self.sha256_before is not None and self.sha256_before == self.sha256_after


@dataclass(frozen=True)
class PurgeReport:
    """What a purge did: `deleted` when every path was deleted, `verified` when every keeper
    still hashes as before. Exit 0 only when both."""

    host: str
    deleted: bool
    paths: tuple[PathResult, ...]
    keepers: tuple[KeeperResult, ...]
    free_bytes_before: int | None
    free_bytes_after: int | None
    expected_bytes: int
    warnings: tuple[str, ...]
    confirmed: bool
    #: why the audit record of this purge could not be written (the command then exits 1)
    audit_error: str | None = None
    keep: KeepRule | None = None

    @property
    def verified(self) -> bool:
        """True when there was at least one keeper and every keeper hashed the same after the
        purge as before (no keeper: nothing witnessed it, so never verified)."""
        return bool(self.keepers) and all(k.verified for k in self.keepers)

    @property
    def verified_by(self) -> str:
        """The witnesses of `verified`, in words ("3 kept files re-verified by sha256")."""
        good = sum(1 for k in self.keepers if k.verified)
        if not self.keepers:
            return "no kept file witnessed this purge"
        return f"{good} of {len(self.keepers)} kept file(s) re-verified by sha256"

    @property
    def ok(self) -> bool:
        """Deleted and verified: the only outcome that exits 0."""
        return self.deleted and self.verified

    @property
    def reclaimed_bytes(self) -> int | None:
        """Free space gained, as the filesystem reports it (snapshots may hold some back)."""
        if self.free_bytes_before is None or self.free_bytes_after is None:
            return None
        return self.free_bytes_after - self.free_bytes_before

    def to_json(self) -> dict[str, Any]:
        """The contract's purge document."""
        return {
            "host": self.host,
            "dry_run": False,
            "deleted": self.deleted,
            "verified": self.verified,
            "witnesses": len(self.keepers),
            "verified_by": self.verified_by,
            "confirmed": self.confirmed,
            "paths": [
                path_json(p, p.refusals, deleted=p.deleted, error=p.error) for p in self.paths
            ],
            "keepers": [
                {
                    "path": k.path,
                    "run": k.run,
                    "sha256_before": k.sha256_before,
                    "sha256_after": k.sha256_after,
                    "verified": k.verified,
                }
                for k in self.keepers
            ],
            "free_bytes_before": self.free_bytes_before,
            "free_bytes_after": self.free_bytes_after,
            "expected_bytes": self.expected_bytes,
            "reclaimed_bytes": self.reclaimed_bytes,
            "warnings": list(self.warnings),
            "audit_error": self.audit_error,
            "keep_newest": self.keep.to_json() if self.keep else None,
        }


def path_json(
    p: PathPlan | PathResult, refusals: tuple[Refusal, ...], deleted: bool, error: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": p.path,
        "resolved": p.resolved,
        "bytes": p.bytes,
        "deleted": deleted,
        "refused": [r.code for r in refusals],
        "refusals": [r.to_json() for r in refusals],
        "checks": dict(p.checks),
    }
    if isinstance(p, PathPlan):
        out["expected_bytes"] = p.expected_bytes
    if error:
        out["error"] = error
    return out
