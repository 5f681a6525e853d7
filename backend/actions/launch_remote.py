"""The launch helper, run on the training host (stdlib + the host library, Python 3.8+).

Called as `HostLink.run_helper("fleetdeck.backend.actions.launch_remote", request)`: one JSON
request with `op` on stdin, one answer on stdout (`hostlib.serve`). Operations:

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

What a run, a checkpoint and a final adapter are comes from `hostlib.layout`; whether a
recorded process still runs from `hostlib.procfs.same_process` (pid and start time). The
estimates (params, LoRA params, GPU memory, disk) live in `launch_estimate`.
"""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

from fleetdeck.backend.actions import launch_estimate as est
from fleetdeck.backend.hostlib import layout, procfs
from fleetdeck.backend.hostlib.serve import serve

TRAINER_MODULE = est.TRAINER_MODULE
LOCK = ".fleetdeck-launch.lock"
# keys that say where things are, not how the run trains: compared after expansion
PATH_KEYS = ("corpus", "tokenizer", "base_model")
RESUMABLE = ("failed", "cancelled", "stalled", "unknown", "running", "queued")


# -- small shared pieces ---------------------------------------------------------------------
def read_manifest(run):
    """run.json of `run` as a dict; {} when absent; None when unreadable."""
    try:
        with open(os.path.join(run, "run.json"), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(run, manifest, exclusive=False):
    """Write run.json atomically; with `exclusive`, fail (FileExistsError) if one exists."""
    final = os.path.join(run, "run.json")
    tmp = os.path.join(run, f".run.json.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        if exclusive:
            # link() refuses an existing name: two launches into one folder cannot both win
            os.link(tmp, final)
            os.unlink(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def record_state(run, manifest, state, **extra):
    """Append a state transition to `manifest` and write it."""
    manifest["state"] = state
    manifest.update(extra)
    manifest.setdefault("states", []).append({"state": state, "time": time.time(), "pid": os.getpid()})
    write_manifest(run, manifest)


def log_line(run, text):
    """One line in train.log, marked as the launcher's, not the trainer's."""
    line = "{} fleetdeck launch: {}\n".format(time.strftime("%Y-%m-%dT%H:%M:%S%z"), text)
    try:
        fd = os.open(os.path.join(run, "train.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def toml_value(v):
    """A TOML literal for a RUN.toml value (str, bool, int, float or a list of those)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return {"nan": "nan", "inf": "inf", "-inf": "-inf"}[repr(v)]
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    # a JSON string is a TOML basic string once DEL (allowed raw in JSON, not in TOML) is escaped
    return json.dumps(str(v), ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_text(config):
    lines = ["# written by fleetdeck launch: the host's own copy, every path absolute"]
    for key in sorted(config):
        if config[key] is not None:
            lines.append(f"{key} = {toml_value(config[key])}")
    return "\n".join(lines) + "\n"


# -- the prerequisite of a chain -------------------------------------------------------------
def after_status(after):
    """(verdict, sentence) for the run a chain waits on: 'ready', 'wait' or 'never'. Ready
    means finished with a final adapter by the one layout rule (a real folder with non-empty
    weights and its config): a crashed or weightless save never fires the chain."""
    manifest = read_manifest(after)
    adapter = layout.final_adapter(after)
    if manifest is None:
        return "never", f"run {after} has an unreadable run.json"
    if not manifest:
        if not os.path.isdir(after):
            return "never", f"run {after} does not exist"
        if adapter:
            return "ready", f"run {after} has its final adapter ({adapter})"
        return "never", f"run {after} holds no run.json, so its end cannot be watched"
    state = manifest.get("state")
    why = manifest.get("error") or manifest.get("cancel_reason")
    if state == "finished":
        if adapter:
            return "ready", f"run {after} finished with its final adapter ({adapter})"
        return "never", f"run {after} finished without a final adapter ({layout.final_adapter_problem(after)})"
    if state in ("failed", "cancelled"):
        return "never", "run {} {}{}".format(after, state, f" ({why})" if why else "")
    if state == "running":
        if procfs.same_process(manifest.get("pid"), manifest.get("start_ticks")):
            return "wait", "run {} is running (pid {})".format(after, manifest.get("pid"))
        again = read_manifest(after) or {}
        if again.get("state") != "running":  # it ended between the two reads
            return after_status(after)
        if not isinstance(manifest.get("start_ticks"), int):
            return "never", ("run {} records pid {} without its start time, so it cannot be told from a "
                             "reused pid; it cannot be waited for".format(after, manifest.get("pid")))
        return "never", "run {} died without finishing (pid {} with its start time is gone)".format(
            after, manifest.get("pid"))
    if state == "queued":
        if procfs.same_process(manifest.get("waiter_pid"), manifest.get("waiter_start_ticks")):
            return "wait", f"run {after} is queued"
        again = read_manifest(after) or {}
        if again.get("state") != "queued":
            return after_status(after)
        return "never", "run {} is queued but its waiter (pid {}) is gone".format(after, manifest.get("waiter_pid"))
    return "never", f"run {after} is in state {state!r}"


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
        check(checks, "base-model", arch in est.ARCHS,
              f"base model {base} is a built-in architecture with random weights" if arch in est.ARCHS
              else "base model {} is not a built-in architecture ({})".format(base, ", ".join(sorted(est.ARCHS))))
    elif not os.path.isdir(base):
        check(checks, "base-model", False, f"base model {base} does not exist on {host}")
    elif not os.path.isfile(os.path.join(base, "config.json")):
        check(checks, "base-model", False, f"base model {base} holds no config.json, so it is not a checkpoint")
    else:
        check(checks, "base-model", True, f"base model {base} exists")
    tok = config.get("tokenizer")
    if tok:
        check(checks, "tokenizer", os.path.isdir(tok) or os.path.isfile(tok),
              "tokenizer {} {}".format(tok, "exists" if os.path.exists(tok) else f"does not exist on {host}"))

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
            check(checks, "after", False, f"{why}; a chain never starts after a run that did not "
                  "finish with its adapter")
        else:
            check(checks, "after", True, why + ("; the new run starts now" if verdict == "ready"
                                               else "; the new run waits for it"))

    trainer = est.missing_modules([TRAINER_MODULE, "torch", "transformers", "peft"])
    check(checks, "trainer", not trainer,
          f"{sys.executable} can import the trainer" if not trainer else
          "{} cannot import {} on {} (install fleetdeck[train] there)".format(sys.executable, ", ".join(trainer), host))

    gpus = est.gpu_table()
    estimate = est.estimate(config, gpus, size)
    est.check_memory(checks, config, gpus, estimate, after)
    est.check_disk(checks, output, estimate)
    seen = [r for r in req.get("live") or () if isinstance(r, dict) and r.get("path") != output]
    est.check_live_runs(checks, config, gpus, req.get("runs") or [], after, bool(req.get("force")), seen)
    return {"passed": all(c["ok"] for c in checks), "checks": checks, "estimate": estimate,
            "config": config, "run_path": output, "after": after, "resume": resume}


def check_output(checks, output, after, roots):
    if os.path.lexists(output) and not os.path.isdir(output):
        return check(checks, "output", False, f"output {output} exists and is not a folder")
    if os.path.isdir(output):
        names = sorted(os.listdir(output))
        held = [n for n in names if layout.is_run([n])]
        if held:
            return check(checks, "output", False, "output {} already holds a run ({}); choose a new "
                         "folder".format(output, ", ".join(held[:3])))
        foreign = [n for n in layout.not_fresh(names) if not n.startswith(".")]
        if foreign:
            return check(checks, "output", False, "output {} holds files that are not a run ({}); "
                         "choose an empty or new folder".format(output, ", ".join(foreign[:3])))
    where = [r for r in roots if os.path.dirname(output) == os.path.abspath(os.path.expanduser(r))]
    note = "" if where else "; note: it is not directly under a runs root of this host, so status and runs will not list it"
    return check(checks, "output", True, f"output {output} holds no run{note}")


def _same_setting(key, a, b):
    if key in PATH_KEYS and isinstance(a, str) and isinstance(b, str) and not a.startswith("random:"):
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
        return manifest, f"run {output} already finished with its final adapter; there is nothing to resume"
    if state == "running" and procfs.same_process(manifest.get("pid"), manifest.get("start_ticks")):
        return manifest, "run {} is running (pid {}); it cannot be resumed while it runs".format(
            output, manifest.get("pid"))
    if state == "queued" and procfs.same_process(manifest.get("waiter_pid"), manifest.get("waiter_start_ticks")):
        return manifest, f"run {output} is queued; it starts by itself"
    if state not in RESUMABLE and state is not None:
        return manifest, f"run {output} is in state {state!r}, which cannot be resumed"
    return manifest, None


def newest_checkpoint(output):
    """(step, path) of the newest checkpoint the trainer can resume from (a `checkpoint-N`
    in `<run>/checkpoints/` with its trainer_state.json), or None."""
    inside = os.path.join(output, "checkpoints")
    done = [(step, path) for step, path in layout.checkpoints(output)
            if os.path.dirname(path) == inside and os.path.isfile(os.path.join(path, "trainer_state.json"))]
    return done[-1] if done else None


def check_resume(checks, output, config):
    """`--resume`: the output is a stopped or failed run of this same config, with a
    checkpoint to continue from."""
    manifest, why = resumable(output)
    if why:
        return check(checks, "resume", False, why)
    newest = newest_checkpoint(output)
    if newest is None:
        return check(checks, "resume", False, f"run {output} has no complete checkpoint (checkpoints/"
                     "checkpoint-N with trainer_state.json) to resume from; launch it into a new folder")
    before = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    differ = sorted(k for k in config if k in before and k not in ("output", "source")
                    and not _same_setting(k, config[k], before[k]))
    if differ:
        return check(checks, "resume", False, "RUN.toml differs from the run's own config in {}; resume "
                     "with the run's own settings ({})".format(", ".join(differ), os.path.join(output, "RUN.toml")))
    state = manifest.get("state") or "without run.json"
    reason = manifest.get("error") or manifest.get("cancel_reason")
    return check(checks, "resume", True, "resumes run {} ({}{}) from {} (step {})".format(
        output, state, f": {reason}" if reason else "", os.path.basename(newest[1]), newest[0]))


# -- launch ----------------------------------------------------------------------------------
def refused(answer, name=None, message=None):
    """The answer of a launch that did not start: the one error shape, checks kept."""
    if name is not None:
        check(answer["checks"], name, False, message)
    bad = next(c for c in answer["checks"] if not c["ok"])
    answer.update(ok=False, passed=False, state="refused",
                  error={"code": bad["name"], "message": bad["message"]})
    return answer


def claim(output, config, after, answer, resume):
    """Write run.json with state `queued`: exclusively for a new run; for `resume`, under the
    launch lock, after checking again that the run is still resumable. None, or why not."""
    run_toml = os.path.join(output, "RUN.toml")
    launch_info = {"time": time.time(), "run_toml": run_toml, "estimate": answer["estimate"], "resume": resume}
    if not resume:
        manifest = {"state": "queued", "pid": None, "after": after, "config": config, "error": None,
                    "waiter_pid": None, "waiter_start_ticks": None, "launch": launch_info,
                    "states": [{"state": "queued", "time": time.time(), "pid": os.getpid()}]}
        try:
            write_manifest(output, manifest, exclusive=True)
        except FileExistsError:
            return f"output {output} was claimed by another launch just now"
        return None
    fd = os.open(os.path.join(output, LOCK), os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        manifest, why = resumable(output)
        if why:
            return why + " (it changed during the launch)"
        manifest = dict(manifest or {})
        manifest.update(after=after, error=None, cancel_reason=None, waiter_pid=None, waiter_start_ticks=None,
                        launch=launch_info)
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
    sup = {"op": "supervise", "run": output, "run_toml": run_toml, "after": after,
           "interval": float(req.get("interval") or 2.0), "source": req["source"]}
    logfd = os.open(os.path.join(output, "train.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # own pipes, not the helper's: the SSH channel closes when the helper exits
        proc = subprocess.Popen([sys.executable, "-c", req["boot"], "fleetdeck-waiter", output],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logfd,
                                cwd=output, start_new_session=True, close_fds=True)
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
        record_state(output, read_manifest(output) or {}, "failed",
                     error=f"the launcher's supervisor exited before starting the run{detail}; see train.log")
        log = os.path.join(output, "train.log")
        answer.update(ok=False, state="failed", error={
            "code": "supervisor", "message": f"the supervisor on the host exited at once{detail}; see {log}"})
        return answer
    answer.update(started)
    answer["run_toml"] = run_toml
    if started["state"] not in ("running", "queued"):
        # the prerequisite already ended badly (or run.json changed): nothing runs
        why = started.get("error") or "run.json says {}".format(started["state"])
        answer.update(ok=False, error={"code": started["state"], "message": str(why)})
    return answer


# -- supervise (the detached process) --------------------------------------------------------
class Stopped(Exception):
    pass


def _stop(signum, frame):
    raise Stopped(signum)


def supervise(req):
    """Wait for the prerequisite, start the trainer, and record what the trainer could not."""
    run, after = req["run"], req.get("after")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH session ending must not end the chain
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    manifest = read_manifest(run) or {}
    manifest.update(waiter_pid=os.getpid(), waiter_start_ticks=procfs.start_ticks(os.getpid()))
    write_manifest(run, manifest)
    reported = False

    def report(obj):
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
                    report({"state": "cancelled", "pid": None, "waiter_pid": os.getpid(), "error": reason})
                    return
                report({"state": "queued", "pid": None, "waiter_pid": os.getpid()})
                time.sleep(req.get("interval", 2.0))
        current = read_manifest(run) or {}
        if current.get("state") != "queued" or current.get("waiter_pid") != os.getpid():
            log_line(run, "run.json changed while waiting (state {!r}); not starting".format(current.get("state")))
            report({"state": current.get("state") or "unknown", "pid": current.get("pid"), "waiter_pid": os.getpid()})
            return
        child = start_trainer(run, req["run_toml"])
    except Stopped as e:
        reason = f"the waiter was stopped (signal {e.args[0]}) before the run started"
        current = read_manifest(run) or manifest
        if current.get("state") == "queued":
            record_state(run, current, "cancelled", cancel_reason=reason, error=reason)
            log_line(run, "cancelled: " + reason)
        report({"state": "cancelled", "pid": None, "waiter_pid": os.getpid(), "error": reason})
        return
    report({"state": "running", "pid": child.pid, "waiter_pid": os.getpid()})
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # once started, stopping the waiter leaves the run alone
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    rc = child.wait()
    watch_end(run, child.pid, rc)
    return {}


def start_trainer(run, run_toml):
    """`<python> -m fleetdeck.backend.train RUN.toml`, its own session, output to train.log. It
    is the user's run, not a fleetdeck helper: the helper marker is not passed on to it."""
    log_line(run, f"starting {sys.executable} -m {TRAINER_MODULE} {run_toml}")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop(procfs.HELPER_ENV, None)
    logfd = os.open(os.path.join(run, "train.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        return subprocess.Popen([sys.executable, "-m", TRAINER_MODULE, run_toml],
                                stdin=subprocess.DEVNULL, stdout=logfd, stderr=subprocess.STDOUT,
                                cwd=run, env=env, start_new_session=True, close_fds=True)
    finally:
        os.close(logfd)


def watch_end(run, pid, rc):
    """After the trainer exited: a run.json still saying queued/running (by it) becomes failed."""
    manifest = read_manifest(run)
    if manifest is None:
        return
    state = manifest.get("state")
    recorded = manifest.get("pid")
    # a pid other than ours that is gone: a torchrun worker of this trainer, killed with it
    if state in ("queued", "running") and (
            recorded in (None, pid) or not procfs.same_process(recorded, manifest.get("start_ticks"))):
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        reason = f"the trainer {how} without recording an end; see train.log"
        record_state(run, manifest, "failed", error=reason, exit_status=rc)
        log_line(run, "failed: " + reason)
    else:
        log_line(run, f"trainer (pid {pid}) exited with status {rc}; run.json says {state}")


OPS = {"preflight": preflight, "launch": launch, "supervise": supervise}

if __name__ == "__main__":
    sys.exit(serve(OPS))
