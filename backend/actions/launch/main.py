"""Launch a training run on a host: pre-flight there, then the trainer detached there.

The controller parses RUN.toml (strictly, with the trainer's own parser) and sends its values to
the launch helper on the host (`host/launch/main.py`, bundled with `estimate`, `runfiles`,
`supervise` beside it and the host library), which checks, writes the host's own copy `<output>/RUN.toml`, claims
`<output>/run.json` (state `queued`) and starts a supervisor in a new session. The supervisor
starts `<python> -m fleetdeck.backend.train <output>/RUN.toml` (python: the host's `python` from
the fleet file) at once, or, with `after`, only when that run finished with a final adapter
(`host/lib/layout.final_adapter`); it marks the run `cancelled` when the prerequisite failed,
was cancelled, died or finished without one. With `resume` the output is a failed or stopped
run, continued from its newest checkpoint. The `live-run` check counts every run the probe
sees running on the host (a Hugging Face Trainer run as much as fleetdeck's own). Every launch
is audited.

A launch whose answer is lost after the request reached the host (the helper's output cut off,
unreadable, or replaced by an error) may still have started the run, so it is not reported
`failed` on that alone: the probe is asked what the output folder is now, and a run there that
was not running or queued before the launch is reported in the state the host shows, with a
`warning` saying the answer was lost.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from fleetdeck.backend.actions.audit_records import LaunchRecord, write
from fleetdeck.backend.actions.fronts import launch_preflight, launch_start
from fleetdeck.backend.actions.launch.result import (
    LaunchResult,
    Preflight,
    error_text,
    preflight_from,
)
from fleetdeck.backend.actions.launch.seen import (
    live_json,
    lost_answer_result,
    runs_seen,
    started_anyway,
)
from fleetdeck.backend.actions.launch.values import launch_after_path, run_values
from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.boot import BOOT
from fleetdeck.backend.fleet.link.bundle import bundle
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.host.launch import main as launch_helper
from fleetdeck.backend.host.launch.wire import Request

HELPER = launch_helper.__name__


def helper_source() -> str:
    """The launch helper's payload as the host gets it (the helper, the estimates and the
    host library, one source text)."""
    return bundle(HELPER)


def _request(
    host: HostConfig,
    values: dict[str, Any],
    after: str | None,
    force: bool,
    poll_interval: float,
    resume: bool,
    live: list[dict[str, Any]],
) -> Request:
    return {
        "host": host.name,
        "config": values,
        "after": after,
        "force": force,
        "resume": resume,
        "live": live,
        "runs": list(host.runs),
        "interval": poll_interval,
        "boot": BOOT,
        "source": helper_source(),
    }


async def preflight(
    link: HostLink,
    run: str | os.PathLike[str] | dict[str, Any],
    after: str | None = None,
    force: bool = False,
    resume: bool = False,
    live: Iterable[Run] | None = None,
) -> Preflight:
    """Every launch check on the host, nothing changed there. `live`: the host's runs from a
    poll just made (else the probe is asked now). ConfigError for a bad RUN.toml, HostError
    when the host cannot be asked."""
    host_cfg = link.host
    values = run_values(run, host_cfg)
    seen = live_json(await runs_seen(link) if live is None else live)
    req = _request(host_cfg, values, launch_after_path(after, host_cfg), force, 2.0, resume, seen)
    answer = await launch_preflight(link, req, source=helper_source())
    return preflight_from(host_cfg.name, answer)


async def launch(
    link: HostLink,
    run: str | os.PathLike[str] | dict[str, Any],
    after: str | None = None,
    force: bool = False,
    poll_interval: float = 2.0,
    resume: bool = False,
    live: Iterable[Run] | None = None,
) -> LaunchResult:
    """Pre-flight, then start the run detached on the host (or queue it after `after`); returns
    as soon as the trainer (or the waiter) runs. `resume`: continue the failed or stopped run in
    the output folder from its newest checkpoint. `live` as for `preflight`. Audited whatever
    happens. ConfigError for a bad RUN.toml (not audited: nothing was asked of the host),
    HostError when the host fails."""
    host_cfg = link.host
    values = run_values(run, host_cfg)
    after_path = launch_after_path(after, host_cfg)
    asked = False
    try:
        before = tuple(await runs_seen(link) if live is None else live)
        req = _request(
            host_cfg, values, after_path, force, poll_interval, resume, live_json(before)
        )
        asked = True
        answer = await launch_start(link, req, source=helper_source())
        pre = preflight_from(host_cfg.name, answer)
    except HostError as e:
        found = await started_anyway(link, str(values["output"]), before) if asked else None
        if found is not None:
            return lost_answer_result(host_cfg, found, after_path, e, force, resume)
        write(
            LaunchRecord(
                host=host_cfg.name,
                result="failed",
                run=values.get("output"),
                after=after_path,
                error=e.message,
                force=force,
                resume=resume,
                absent=frozenset({"pid", "state", "waiter_pid", "preflight", "reason", "warning"}),
            )
        )
        raise
    bad = pre.refusal
    state = str(answer.get("state") or ("refused" if bad else "failed"))
    if state == "refused" and bad is not None:
        error: str | None = bad.message
    else:
        error = error_text(answer)
    result = LaunchResult(
        host=host_cfg.name,
        run_path=pre.run_path,
        state=state,
        pid=answer.get("pid"),
        preflight=pre,
        after=pre.after,
        waiter_pid=answer.get("waiter_pid"),
        run_toml=answer.get("run_toml"),
        error=error,
        reason=bad.name if (state == "refused" and bad) else None,
    )
    write(
        LaunchRecord(
            host=host_cfg.name,
            result={"running": "started"}.get(state, state),
            run=result.run_path,
            pid=result.pid,
            state=state,
            after=result.after,
            force=force,
            resume=resume,
            waiter_pid=result.waiter_pid,
            preflight=pre.checks_json(),
            error=error,
            reason=result.reason,
            absent=frozenset({"warning"}),
        )
    )
    return result
