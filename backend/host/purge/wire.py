"""What the purge helper and the controller say to each other, declared once: each op's request
(without its `op`, which the controller's front adds) and its answer (without `ok`, which
`serve` adds). The controller holds every answer to these records before it reads one
(`backend/fleet/link/wire.py`); the host builds them. Python 3.8: `typing.TypedDict`, the
optional keys of a record in a `total=False` subclass of its required ones."""
# Runs on the host's Python 3.8 or newer.

from typing import Any, Dict, List, Optional, TypedDict

CHECK = "check"
EXECUTE = "execute"


class KeepAsked(TypedDict):
    """A run that keeps its newest `n` checkpoints instead of a final adapter (`check`)."""

    run: str
    n: int


class KeepRule(TypedDict):
    """The keep rule as judged, sent back with `execute`: the run and the checkpoints it keeps
    (a run that did not resolve is refused by the host)."""

    run: Optional[str]
    kept: List[str]


class CheckRequest(TypedDict, total=False):
    """`check`: the paths (or the `keep` rule that names them) and the roots they must be under."""

    paths: List[str]
    roots: List[str]
    keep: KeepAsked


class KeeperPin(TypedDict):
    """A kept file as checked: it must be this inode with these bytes when `execute` runs."""

    path: str
    dev: int
    ino: int
    bytes: int
    mtime_ns: int


class Plan(TypedDict):
    """What `execute` compares with: every component's pins of each path, the kept files."""

    pins: List[List[List[int]]]
    keepers: List[KeeperPin]


class _ExecuteRequired(TypedDict):
    paths: List[str]
    roots: List[str]
    plan: Plan


class ExecuteRequest(_ExecuteRequired, total=False):
    """`execute`: the plan's paths, roots and pins, with its keep rule and the best checkpoints
    allowed to go."""

    keep: KeepRule
    allow_best: List[str]


class _FactsRequired(TypedDict):
    paths: List[Dict[str, Any]]
    roots: List[Dict[str, Any]]
    keepers: List[Dict[str, Any]]
    holders: List[Dict[str, Any]]
    proc_unreadable: List[Any]
    docker: Dict[str, Any]
    evals: List[Dict[str, Any]]


class Facts(_FactsRequired, total=False):
    """`check`'s answer: every fact a purge is judged on (`verdict.evaluate` reads them), each
    path's, each root's, each kept run's, who holds what, Docker's mounts, the runs' evals;
    `keep` when the request named a keep rule; `allow_best` as `execute` judges them."""

    keep: Dict[str, Any]
    allow_best: List[str]


class Verdict(TypedDict):
    """What `verdict.evaluate` made of the facts: each path's refusals, the purge's warnings."""

    paths: List[Dict[str, Any]]
    warnings: List[Any]


class Removal(TypedDict):
    """One path's removal: deleted, or the error or the change that stopped it."""

    deleted: bool
    error: Optional[str]
    changed: Optional[str]
    free_bytes_after: Optional[int]


class _ExecutedRequired(TypedDict):
    facts: Facts
    verdict: Verdict
    changed: List[Optional[str]]
    results: List[Removal]
    attempted: bool


class Executed(_ExecutedRequired, total=False):
    """`execute`'s answer: the facts gathered again and judged, what changed since the plan,
    each removal when they were attempted, the keepers hashed after."""

    sha256_after: Dict[str, Optional[str]]
