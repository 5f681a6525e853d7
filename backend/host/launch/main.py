"""The launch helper, run on the training host (stdlib + the host library, Python 3.8+).

Called as `HostLink.run_helper("fleetdeck.backend.host.launch.main", request)`: one JSON
request with `op` on stdin, one answer on stdout (`host/lib/serve`). Operations:

- `preflight`: every check, nothing changed on the host. The answer is `ok` (the helper
  worked) with `passed` (every check passed) and the checks.
- `launch`: the same checks; when all pass, create the run folder, write the host's own copy of
  RUN.toml (`<output>/RUN.toml`, every path absolute), claim `<output>/run.json` with state
  `queued` (exclusively; with `resume`, under a lock, over the stopped run's own), and start the
  supervisor detached (new session). It answers as soon as the supervisor has started the
  trainer (state `running`, the trainer's pid) or begun waiting (state `queued`). A refusal is
  `{"ok": false, "error": {"code": <check>, "message": ...}, "state": "refused", "checks": ...}`.
- `supervise`: the detached supervisor itself. It waits for the `after` run when there is one,
  starts `<python> -m fleetdeck.backend.train <output>/RUN.toml` (stdin /dev/null, output
  appended to train.log), marks the run `cancelled` (never started) when the prerequisite did
  not finish with its final adapter, and `failed` when the trainer exits without recording an end.

What a run, a checkpoint and a final adapter are comes from `host/lib/layout`; whether a
recorded process still runs from `host/lib/procfs.same_process` (pid and start time). The
checks live beside it in `preflight` (with the estimates of params, LoRA params, GPU memory and
disk in `estimate`, the targets in `targets`, the host's GPUs, memory and disk in `resources`,
the runs live on it in `liveruns`), the run files in `runfiles` and the detached supervisor in
`supervise`; each op's request and answer are declared in `wire`.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, Optional

from fleetdeck.backend.host.launch.preflight import preflight, resumable
from fleetdeck.backend.host.launch.resources import check
from fleetdeck.backend.host.launch.runfiles import (
    read_manifest,
    record_state,
    toml_text,
    write_manifest,
)
from fleetdeck.backend.host.launch.supervise import supervise
from fleetdeck.backend.host.launch.wire import (
    LAUNCH,
    PREFLIGHT,
    SUPERVISE,
    Launched,
    Request,
    SuperviseRequest,
)
from fleetdeck.backend.host.lib import flags
from fleetdeck.backend.host.lib.serve import serve

LOCK = ".fleetdeck-launch.lock"


# -- launch ----------------------------------------------------------------------------------
def refused(
    answer: Launched, name: Optional[str] = None, message: Optional[str] = None
) -> Launched:
    """The answer of a launch that did not start: the one error shape, checks kept."""
    if name is not None:
        check(answer["checks"], name, False, message or "")
    bad = next(c for c in answer["checks"] if not c["ok"])
    answer["ok"] = False
    answer["passed"] = False
    answer["state"] = "refused"
    answer["error"] = {"code": bad["name"], "message": bad["message"]}
    return answer


def claim(
    output: str, config: Dict[str, Any], after: Optional[str], answer: Launched, resume: bool
) -> Optional[str]:
    """Write run.json with state `queued`: exclusively for a new run; for `resume`, under the
    launch lock, after checking again that the run is still resumable. None, or why not."""
    run_toml = os.path.join(output, "RUN.toml")
    launch_info = {
        "time": time.time(),
        "run_toml": run_toml,
        "estimate": answer["estimate"],
        "resume": resume,
    }
    if not resume:
        manifest = {
            "state": "queued",
            "pid": None,
            "after": after,
            "config": config,
            "error": None,
            "waiter_pid": None,
            "waiter_start_ticks": None,
            "launch": launch_info,
            "states": [{"state": "queued", "time": time.time(), "pid": os.getpid()}],
        }
        try:
            write_manifest(output, manifest, exclusive=True)
        except FileExistsError:
            return f"output {output} was claimed by another launch just now"
        return None
    fd = os.open(os.path.join(output, LOCK), os.O_WRONLY | os.O_CREAT | flags.CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        prior, why = resumable(output)
        if why:
            return why + " (it changed during the launch)"
        manifest = dict(prior or {})
        manifest.update(
            after=after,
            error=None,
            cancel_reason=None,
            waiter_pid=None,
            waiter_start_ticks=None,
            launch=launch_info,
        )
        record_state(output, manifest, "queued", resumed_from_state=manifest.get("state"))
        return None
    finally:
        os.close(fd)


def launch(req: Request) -> Launched:
    """Pre-flight, then claim the run folder and start the supervisor; answer at once."""
    answer: Launched = {**preflight(req)}
    if not answer["passed"]:
        return refused(answer)
    config, output, after = answer["config"], answer["run_path"], answer["after"]
    os.makedirs(output, exist_ok=True)
    why = claim(output, config, after, answer, answer["resume"])
    if why:
        return refused(answer, "resume" if answer["resume"] else "output", why)
    # written only after the claim, so a launch that lost the race leaves the winner's copy alone
    run_toml = os.path.join(output, "RUN.toml")
    with open(run_toml, "w", encoding="utf-8") as f:
        f.write(toml_text(config))
    sup: SuperviseRequest = {
        "op": SUPERVISE,
        "run": output,
        "run_toml": run_toml,
        "after": after,
        "interval": float(req.get("interval") or 2.0),
        "source": req["source"],
    }
    logfd = os.open(
        os.path.join(output, "train.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        # own pipes, not the helper's: the SSH channel closes when the helper exits
        proc = subprocess.Popen(
            [sys.executable, "-c", req["boot"], "fleetdeck-waiter", output],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=logfd,
            cwd=output,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(logfd)
    src = req["source"].encode("utf-8")
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None  # both are PIPE, asked for above
    stdin.write(str(len(src)).encode() + b"\n" + src + json.dumps(sup).encode())
    stdin.close()
    line = stdout.readline()
    stdout.close()
    try:
        started = json.loads(line)
    except ValueError:
        started = None
    if not isinstance(started, dict) or "state" not in started:
        err = started.get("error") if isinstance(started, dict) else None
        detail = ": " + str(err.get("message")) if isinstance(err, dict) else ""
        record_state(
            output,
            read_manifest(output) or {},
            "failed",
            error=f"the launcher's supervisor exited before starting the run{detail}; see train.log",
        )
        log = os.path.join(output, "train.log")
        answer["ok"] = False
        answer["state"] = "failed"
        answer["error"] = {
            "code": "supervisor",
            "message": f"the supervisor on the host exited at once{detail}; see {log}",
        }
        return answer
    # what the supervisor reported (`supervise.report`): its state, the trainer's and its own pid
    answer["state"] = started["state"]
    answer["pid"] = started.get("pid")
    answer["waiter_pid"] = started.get("waiter_pid")
    if "error" in started:
        answer["error"] = started["error"]
    answer["run_toml"] = run_toml
    if started["state"] not in ("running", "queued"):
        # the prerequisite already ended badly (or run.json changed): nothing runs
        why = started.get("error") or "run.json says {}".format(started["state"])
        answer["ok"] = False
        answer["error"] = {"code": started["state"], "message": str(why)}
    return answer


OPS = {PREFLIGHT: preflight, LAUNCH: launch, SUPERVISE: supervise}

if __name__ == "__main__":
    sys.exit(serve(OPS))
