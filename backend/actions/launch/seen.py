"""The runs the probe sees on the host around a launch: the live runs sent with the request,
and, after a launch whose answer was lost, the run it may have started anyway, reported in
the state the host shows and audited."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from typing import Any

from fleetdeck.backend.actions.audit_records import LaunchRecord, write
from fleetdeck.backend.actions.launch.result import LaunchResult, Preflight
from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.fleet.poller import probe_request, probe_source
from fleetdeck.backend.fleet.validate import host_from_probe

#: after a lost answer: how long a run still `queued` in its run.json (its trainer starting) is
#: asked about again before it is reported queued
SETTLE_S = 30.0


def live_json(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """The runs a probe saw `running`, as the helper's `live` list."""
    return [{"path": r.path, "pid": r.pid, "name": r.name} for r in runs if r.state == "running"]


async def runs_seen(link: HostLink) -> tuple[Run, ...]:
    """Every run the probe sees on the link's host now (one one-shot probe). HostError when
    the probe cannot answer: without it no live run could be ruled out."""
    answer = await link.run_helper(probe_source(), probe_request(link.host), what="probe")
    if not isinstance(answer, dict) or ("error" in answer and "runs" not in answer):
        err = answer.get("error") if isinstance(answer, dict) else answer
        msg = err.get("message") if isinstance(err, dict) else err
        raise HostError(link.name, f"the probe could not list the runs on the host: {msg}", "probe")
    return host_from_probe(link.name, answer, 0.0, 0.0).runs


def _same_run_path(seen: str, output: str) -> bool:
    """Whether the probe's (expanded) path `seen` is the output as RUN.toml wrote it for the host."""
    if output.startswith("~/"):
        return seen.rstrip("/").endswith(output[1:].rstrip("/"))
    return os.path.normpath(seen) == os.path.normpath(output)


async def started_anyway(link: HostLink, output: str, before: Iterable[Run]) -> Run | None:
    """After a launch whose answer was lost: the run the probe now sees at `output`, when it was
    not already running or queued before the launch (so this launch started it); None when the
    probe sees none there or cannot answer. A run whose run.json still says `queued` (its
    trainer starting, no chain) is asked about again for up to SETTLE_S."""
    was = {r.path: r.state for r in before}
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            runs = await runs_seen(link)
        except HostError:
            return None
        run = next((r for r in runs if _same_run_path(r.path, output)), None)
        if run is None or was.get(run.path) in ("running", "queued"):
            return None
        if run.state != "queued" or time.monotonic() >= deadline:
            return run
        await asyncio.sleep(1.0)


def lost_answer_result(
    host_cfg: HostConfig, run: Run, after: str | None, e: HostError, force: bool, resume: bool
) -> LaunchResult:
    warning = (
        f"the launch helper's answer was lost ({e.message}); the host shows the run "
        f"{run.state}" + (f" ({run.reason})" if run.reason else "")
    )
    ok = run.state in ("running", "queued", "finished")
    result = LaunchResult(
        host=host_cfg.name,
        run_path=run.path,
        state=run.state,
        pid=run.pid,
        preflight=Preflight(host=host_cfg.name, run_path=run.path, after=after, checks=()),
        after=after,
        error=None if ok else (run.reason or f"the run is {run.state}"),
        warning=warning,
    )
    write(
        LaunchRecord(
            host=host_cfg.name,
            result={"running": "started"}.get(run.state, run.state),
            run=run.path,
            pid=run.pid,
            state=run.state,
            after=after,
            force=force,
            resume=resume,
            error=result.error,
            warning=warning,
            absent=frozenset({"waiter_pid", "preflight", "reason"}),
        )
    )
    return result
