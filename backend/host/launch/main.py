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
estimates (params, LoRA params, GPU memory, disk) live beside it in `estimate`, the run files in
`runfiles` and the detached supervisor in `supervise`.
"""

import fcntl
import json
import os
import subprocess
import sys
import time

from fleetdeck.backend.host.launch import estimate as est
from fleetdeck.backend.host.launch.runfiles import (
    after_status,
    read_manifest,
    record_state,
    toml_text,
    write_manifest,
)
from fleetdeck.backend.host.launch.supervise import supervise
from fleetdeck.backend.host.lib import flags, layout, procfs
from fleetdeck.backend.host.lib.serve import serve

TRAINER_MODULE = est.TRAINER_MODULE
LOCK = ".fleetdeck-launch.lock"
# keys that say where things are, not how the run trains: compared after expansion
PATH_KEYS = ("corpus", "tokenizer", "base_model")
RESUMABLE = ("failed", "cancelled", "stalled", "unknown", "running", "queued")


# -- pre-flight ------------------------------------------------------------------------------
def check(checks, name, ok, message):
    checks.append({"name": name, "ok": bool(ok), "message": message})
    return ok


def expand(config, key):
    value = config.get(key)
    return os.path.abspath(os.path.expanduser(value)) if isinstance(value, str) and value else value


def preflight(req):
    """All launch checks; nothing is changed. The answer names every check and the estimate."""
    host = req.get("host", "this host")
    config = dict(req["config"])
    for key in ("corpus", "output", "tokenizer"):
        config[key] = expand(config, key)
    if not str(config["base_model"]).startswith("random:"):
        config["base_model"] = expand(config, "base_model")
    after = os.path.abspath(os.path.expanduser(req["after"])) if req.get("after") else None
    output = config["output"]
    checks = []

    base = config["base_model"]
    if base.startswith("random:"):
        arch = base.split(":", 1)[1]
        check(
            checks,
            "base-model",
            arch in est.ARCHS,
            f"base model {base} is a built-in architecture with random weights"
            if arch in est.ARCHS
            else "base model {} is not a built-in architecture ({})".format(
                base, ", ".join(sorted(est.ARCHS))
            ),
        )
    elif not os.path.isdir(base):
        check(checks, "base-model", False, f"base model {base} does not exist on {host}")
    elif not os.path.isfile(os.path.join(base, "config.json")):
        check(
            checks,
            "base-model",
            False,
            f"base model {base} holds no config.json, so it is not a checkpoint",
        )
    else:
        check(checks, "base-model", True, f"base model {base} exists")
    tok = config.get("tokenizer")
    if tok:
        check(
            checks,
            "tokenizer",
            os.path.isdir(tok) or os.path.isfile(tok),
            "tokenizer {} {}".format(
                tok, "exists" if os.path.exists(tok) else f"does not exist on {host}"
            ),
        )

    corpus = config["corpus"]
    size = est.corpus_bytes(corpus)
    if not os.path.exists(corpus):
        check(checks, "corpus", False, f"corpus {corpus} does not exist on {host}")
    elif size == 0:
        check(checks, "corpus", False, f"corpus {corpus} is empty")
    else:
        check(checks, "corpus", True, f"corpus {corpus} exists ({size} bytes)")

    resume = bool(req.get("resume"))
    if resume:
        check_resume(checks, output, config)
    else:
        check_output(checks, output, after, req.get("runs") or [])
    if after is not None:
        verdict, why = after_status(after)
        if after == output:
            check(checks, "after", False, f"a run cannot wait for itself ({after})")
        elif verdict == "never":
            check(
                checks,
                "after",
                False,
                f"{why}; a chain never starts after a run that did not finish with its adapter",
            )
        else:
            check(
                checks,
                "after",
                True,
                why
                + (
                    "; the new run starts now"
                    if verdict == "ready"
                    else "; the new run waits for it"
                ),
            )

    if any(c["name"] == "base-model" and c["ok"] for c in checks):
        est.check_targets(checks, config)

    trainer = est.missing_modules([TRAINER_MODULE, "torch", "transformers", "peft"])
    check(
        checks,
        "trainer",
        not trainer,
        f"{sys.executable} can import the trainer"
        if not trainer
        else "{} cannot import {} on {}: make a venv there with fleetdeck[train] installed and set this host's "
        'python to its interpreter in the fleet file (docs/launch.md, "A host ready to train"; the probe '
        "and helpers then use it too)".format(sys.executable, ", ".join(trainer), host),
    )

    gpus = est.gpu_table()
    estimate = est.estimate(config, gpus, size)
    est.check_gpus(checks, config, gpus)
    est.check_memory(checks, config, gpus, estimate, after)
    est.check_disk(checks, output, estimate)
    seen = [r for r in req.get("live") or () if isinstance(r, dict) and r.get("path") != output]
    est.check_live_runs(
        checks, config, gpus, req.get("runs") or [], after, bool(req.get("force")), seen
    )
    return {
        "passed": all(c["ok"] for c in checks),
        "checks": checks,
        "estimate": estimate,
        "config": config,
        "run_path": output,
        "after": after,
        "resume": resume,
    }


def check_output(checks, output, after, roots):
    if os.path.lexists(output) and not os.path.isdir(output):
        return check(checks, "output", False, f"output {output} exists and is not a folder")
    if os.path.isdir(output):
        names = sorted(os.listdir(output))
        held = [n for n in names if layout.is_run([n])]
        if held:
            return check(
                checks,
                "output",
                False,
                "output {} already holds a run ({}); choose a new folder".format(
                    output, ", ".join(held[:3])
                ),
            )
        foreign = [n for n in layout.not_fresh(names) if not n.startswith(".")]
        if foreign:
            return check(
                checks,
                "output",
                False,
                "output {} holds files that are not a run ({}); "
                "choose an empty or new folder".format(output, ", ".join(foreign[:3])),
            )
    where = [r for r in roots if os.path.dirname(output) == os.path.abspath(os.path.expanduser(r))]
    note = (
        ""
        if where
        else "; note: it is not directly under a runs root of this host, so status and runs will not list it"
    )
    return check(checks, "output", True, f"output {output} holds no run{note}")


def _same_setting(key, a, b):
    if (
        key in PATH_KEYS
        and isinstance(a, str)
        and isinstance(b, str)
        and not a.startswith("random:")
    ):
        return os.path.abspath(os.path.expanduser(a)) == os.path.abspath(os.path.expanduser(b))
    return a == b


def resumable(output):
    """(manifest, None) when the run at `output` may be continued, else (manifest, why not)."""
    if not os.path.isdir(output):
        return None, f"run {output} does not exist on this host; there is nothing to resume"
    manifest = read_manifest(output)
    if manifest is None:
        return None, f"run {output} has an unreadable run.json; refusing to touch it"
    state = manifest.get("state")
    if state == "finished" or layout.final_adapter(output):
        return (
            manifest,
            f"run {output} already finished with its final adapter; there is nothing to resume",
        )
    if state == "running" and procfs.same_process(manifest.get("pid"), manifest.get("start_ticks")):
        return manifest, "run {} is running (pid {}); it cannot be resumed while it runs".format(
            output, manifest.get("pid")
        )
    if state == "queued" and procfs.same_process(
        manifest.get("waiter_pid"), manifest.get("waiter_start_ticks")
    ):
        return manifest, f"run {output} is queued; it starts by itself"
    if state not in RESUMABLE and state is not None:
        return manifest, f"run {output} is in state {state!r}, which cannot be resumed"
    return manifest, None


def newest_checkpoint(output):
    """(step, path) of the newest checkpoint the trainer can resume from (a complete
    `checkpoint-N` by the layout's rule in `<run>/checkpoints/`, with its trainer_state.json),
    or None."""
    done = layout.resumable_checkpoints(output)
    return done[-1] if done else None


def check_resume(checks, output, config):
    """`--resume`: the output is a stopped or failed run of this same config, with a
    checkpoint to continue from."""
    manifest, why = resumable(output)
    if why:
        return check(checks, "resume", False, why)
    newest = newest_checkpoint(output)
    if newest is None:
        return check(
            checks,
            "resume",
            False,
            f"run {output} has no complete checkpoint (checkpoints/"
            "checkpoint-N with its adapter weights, config and trainer_state.json) to resume from; launch it "
            "into a new folder",
        )
    before = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    differ = sorted(
        k
        for k in config
        if k in before
        and k not in ("output", "source")
        and not _same_setting(k, config[k], before[k])
    )
    if differ:
        return check(
            checks,
            "resume",
            False,
            "RUN.toml differs from the run's own config in {}; resume "
            "with the run's own settings ({})".format(
                ", ".join(differ), os.path.join(output, "RUN.toml")
            ),
        )
    state = manifest.get("state") or "without run.json"
    reason = manifest.get("error") or manifest.get("cancel_reason")
    return check(
        checks,
        "resume",
        True,
        "resumes run {} ({}{}) from {} (step {})".format(
            output, state, f": {reason}" if reason else "", os.path.basename(newest[1]), newest[0]
        ),
    )


# -- launch ----------------------------------------------------------------------------------
def refused(answer, name=None, message=None):
    """The answer of a launch that did not start: the one error shape, checks kept."""
    if name is not None:
        check(answer["checks"], name, False, message)
    bad = next(c for c in answer["checks"] if not c["ok"])
    answer.update(
        ok=False,
        passed=False,
        state="refused",
        error={"code": bad["name"], "message": bad["message"]},
    )
    return answer


def claim(output, config, after, answer, resume):
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
        manifest, why = resumable(output)
        if why:
            return why + " (it changed during the launch)"
        manifest = dict(manifest or {})
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


def launch(req):
    """Pre-flight, then claim the run folder and start the supervisor; answer at once."""
    answer = preflight(req)
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
    sup = {
        "op": "supervise",
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
    proc.stdin.write(str(len(src)).encode() + b"\n" + src + json.dumps(sup).encode())
    proc.stdin.close()
    line = proc.stdout.readline()
    proc.stdout.close()
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
        answer.update(
            ok=False,
            state="failed",
            error={
                "code": "supervisor",
                "message": f"the supervisor on the host exited at once{detail}; see {log}",
            },
        )
        return answer
    answer.update(started)
    answer["run_toml"] = run_toml
    if started["state"] not in ("running", "queued"):
        # the prerequisite already ended badly (or run.json changed): nothing runs
        why = started.get("error") or "run.json says {}".format(started["state"])
        answer.update(ok=False, error={"code": started["state"], "message": str(why)})
    return answer


OPS = {"preflight": preflight, "launch": launch, "supervise": supervise}

if __name__ == "__main__":
    sys.exit(serve(OPS))
