"""The launch supervisor, detached on the training host (stdlib + the host library): it waits for
the run a chain follows, starts the trainer, and records what the trainer could not."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from fleetdeck.backend.host.launch.liveruns import TRAINER_MODULE
from fleetdeck.backend.host.launch.runfiles import (
    after_status,
    log_line,
    read_manifest,
    record_state,
    write_manifest,
)
from fleetdeck.backend.host.lib import procfs

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from types import FrameType
    from typing import Any, Dict, Optional

    from fleetdeck.backend.host.launch.wire import SuperviseRequest


class Stopped(Exception):
    pass


def _stop(signum: int, frame: Optional[FrameType]) -> None:
    raise Stopped(signum)


def supervise(req: SuperviseRequest) -> Dict[str, Any]:
    """Wait for the prerequisite, start the trainer, and record what the trainer could not."""
    run, after = req["run"], req.get("after")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH session ending must not end the chain
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    manifest = read_manifest(run) or {}
    manifest.update(waiter_pid=os.getpid(), waiter_start_ticks=procfs.start_ticks(os.getpid()))
    write_manifest(run, manifest)
    reported = False

    def report(obj: Dict[str, Any]) -> None:
        nonlocal reported
        if not reported:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()
            # nobody reads after this: the launching helper and its SSH channel are gone
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
            reported = True

    try:
        if after:
            log_line(run, f"queued after {after}; waiting for it to finish with its adapter")
            while True:
                verdict, why = after_status(after)
                if verdict == "ready":
                    log_line(run, why + "; starting")
                    break
                if verdict == "never":
                    reason = why + "; this run was never started"
                    current = read_manifest(run) or manifest
                    record_state(run, current, "cancelled", cancel_reason=reason, error=reason)
                    log_line(run, "cancelled: " + reason)
                    report(
                        {
                            "state": "cancelled",
                            "pid": None,
                            "waiter_pid": os.getpid(),
                            "error": reason,
                        }
                    )
                    return {}
                report({"state": "queued", "pid": None, "waiter_pid": os.getpid()})
                time.sleep(req.get("interval", 2.0))
        current = read_manifest(run) or {}
        if current.get("state") != "queued" or current.get("waiter_pid") != os.getpid():
            log_line(
                run,
                "run.json changed while waiting (state {!r}); not starting".format(
                    current.get("state")
                ),
            )
            report(
                {
                    "state": current.get("state") or "unknown",
                    "pid": current.get("pid"),
                    "waiter_pid": os.getpid(),
                }
            )
            return {}
        child = start_trainer(run, req["run_toml"])
    except Stopped as e:
        reason = f"the waiter was stopped (signal {e.args[0]}) before the run started"
        current = read_manifest(run) or manifest
        if current.get("state") == "queued":
            record_state(run, current, "cancelled", cancel_reason=reason, error=reason)
            log_line(run, "cancelled: " + reason)
        report({"state": "cancelled", "pid": None, "waiter_pid": os.getpid(), "error": reason})
        return {}
    report({"state": "running", "pid": child.pid, "waiter_pid": os.getpid()})
    signal.signal(
        signal.SIGTERM, signal.SIG_DFL
    )  # once started, stopping the waiter leaves the run alone
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    rc = child.wait()
    watch_end(run, child.pid, rc)
    return {}


def start_trainer(run: str, run_toml: str) -> subprocess.Popen[bytes]:
    """`<python> -m fleetdeck.backend.train RUN.toml`, its own session, output to train.log. It
    is the user's run, not a fleetdeck helper: the helper marker is not passed on to it."""
    log_line(run, f"starting {sys.executable} -m {TRAINER_MODULE} {run_toml}")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop(procfs.HELPER_ENV, None)
    logfd = os.open(os.path.join(run, "train.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", TRAINER_MODULE, run_toml],
            stdin=subprocess.DEVNULL,
            stdout=logfd,
            stderr=subprocess.STDOUT,
            cwd=run,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(logfd)


def watch_end(run: str, pid: int, rc: int) -> None:
    """After the trainer exited: a run.json still saying queued/running (by it) becomes failed."""
    manifest = read_manifest(run)
    if manifest is None:
        return
    state = manifest.get("state")
    recorded = manifest.get("pid")
    # a pid other than ours that is gone: a torchrun worker of this trainer, killed with it
    if state in ("queued", "running") and (
        recorded in (None, pid) or not procfs.same_process(recorded, manifest.get("start_ticks"))
    ):
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        reason = f"the trainer {how} without recording an end; see train.log"
        record_state(run, manifest, "failed", error=reason, exit_status=rc)
        log_line(run, "failed: " + reason)
    else:
        log_line(run, f"trainer (pid {pid}) exited with status {rc}; run.json says {state}")
