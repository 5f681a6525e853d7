"""What the launch helper and the controller say to each other, declared once: `preflight` and
`launch` take one request (without its `op`, which the controller's fronts add) and answer
with the checks; `supervise` is what the helper sends the detached supervisor it starts. The
controller holds each answer that carries checks to `Checked` or `Launched`
(`backend/fleet/link/wire.py`). Python 3.8: `typing.TypedDict`, optional keys in a
`total=False` subclass."""
# Runs on the host's Python 3.8 or newer.

from typing import Any, Dict, List, Optional, TypedDict

PREFLIGHT = "preflight"
LAUNCH = "launch"
SUPERVISE = "supervise"


class Request(TypedDict):
    """`preflight` and `launch`: the host, RUN.toml's values as read for it, the run it waits
    for, whether to force past a shared GPU or resume, the runs live there now, the fleet's run
    roots, the supervisor's poll interval, and the boot line and source it is started with."""

    host: str
    config: Dict[str, Any]
    after: Optional[str]
    force: bool
    resume: bool
    live: List[Dict[str, Any]]
    runs: List[str]
    interval: float
    boot: str
    source: str


class SuperviseRequest(TypedDict):
    """`supervise`: the run to start, its RUN.toml, the run it waits for, how often to look."""

    op: str
    run: str
    run_toml: str
    after: Optional[str]
    interval: float
    source: str


class Check(TypedDict):
    """One pre-flight check: its name, whether it passed, and why."""

    name: str
    ok: bool
    message: str


class Checked(TypedDict):
    """`preflight`'s answer (and the start of `launch`'s): whether every check passed, the
    checks, the estimate, the config as checked, the run's folder, the run it waits for."""

    passed: bool
    checks: List[Check]
    estimate: Dict[str, Any]
    config: Dict[str, Any]
    run_path: str
    after: Optional[str]
    resume: bool


class Launched(Checked, total=False):
    """`launch`'s answer: the checks, and once it started, the run's state (`running` or
    `queued`; `refused` or `failed` with the error shape), the trainer's and the waiter's pids,
    the host's RUN.toml."""

    ok: bool
    state: str
    pid: Optional[int]
    waiter_pid: Optional[int]
    run_toml: str
    error: Any
