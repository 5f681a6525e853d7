"""Launch's pre-flight, run on the training host (stdlib + the host library, Python 3.8+):
every check of a launch request, nothing changed on the host. The base model, tokenizer and
corpus exist; the output is a fresh folder (or, with `resume`, a stopped run of the same config
with a checkpoint); the run it waits for can still finish; the targets match
(`targets`); the trainer imports; the GPUs, memory and disk suffice (`resources`, against
`estimate`); no other run is live on its GPUs (`liveruns`).
"""

from __future__ import annotations

import json
import os
import sys

from fleetdeck.backend.host.launch.estimate import corpus_bytes, estimate
from fleetdeck.backend.host.launch.liveruns import TRAINER_MODULE, check_live_runs
from fleetdeck.backend.host.launch.resources import (
    check,
    check_disk,
    check_gpus,
    check_memory,
    gpu_table,
)
from fleetdeck.backend.host.launch.runfiles import after_status, read_manifest
from fleetdeck.backend.host.launch.shapes import ARCHS
from fleetdeck.backend.host.launch.targets import check_targets
from fleetdeck.backend.host.launch.wire import Checked, Request
from fleetdeck.backend.host.lib import layout, procfs, runner

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, Iterable, List, Optional, Tuple

    from fleetdeck.backend.host.launch.wire import Check

# keys that say where things are, not how the run trains: compared after expansion
PATH_KEYS = ("corpus", "tokenizer", "base_model")
RESUMABLE = ("failed", "cancelled", "stalled", "unknown", "running", "queued")


_FIND = """import importlib.util, json, sys
out = []
for n in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(n)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        out.append(n)
print(json.dumps(out))
"""


def missing_modules(names: Iterable[str], python: Optional[str] = None) -> List[str]:
    """The module names `python` (default: this interpreter) cannot find. Asked of a fresh
    interpreter, as the trainer will start: inside a helper payload `fleetdeck` is the
    payload's own package, which holds only what the payload carries."""
    r = runner.run([python or sys.executable, "-c", _FIND, *names], timeout=60)
    try:
        out = json.loads(r.out.decode("utf-8", "replace"))
    except ValueError:
        return list(names)
    return [n for n in out if isinstance(n, str)]


def expand(config: Dict[str, Any], key: str) -> Any:
    value = config.get(key)
    return os.path.abspath(os.path.expanduser(value)) if isinstance(value, str) and value else value


def preflight(req: Request) -> Checked:
    """All launch checks; nothing is changed. The answer names every check and the estimate."""
    host = req.get("host", "this host")
    config = dict(req["config"])
    for key in ("corpus", "output", "tokenizer"):
        config[key] = expand(config, key)
    if not str(config["base_model"]).startswith("random:"):
        config["base_model"] = expand(config, "base_model")
    asked_after = req.get("after")
    after = os.path.abspath(os.path.expanduser(asked_after)) if asked_after else None
    output = config["output"]
    checks: List[Check] = []

    base = config["base_model"]
    if base.startswith("random:"):
        arch = base.split(":", 1)[1]
        check(
            checks,
            "base-model",
            arch in ARCHS,
            f"base model {base} is a built-in architecture with random weights"
            if arch in ARCHS
            else "base model {} is not a built-in architecture ({})".format(
                base, ", ".join(sorted(ARCHS))
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
    size = corpus_bytes(corpus)
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
        check_targets(checks, config)

    trainer = missing_modules([TRAINER_MODULE, "torch", "transformers", "peft"])
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

    gpus = gpu_table()
    figures = estimate(config, gpus, size)
    check_gpus(checks, config, gpus)
    check_memory(checks, config, gpus, figures, after)
    check_disk(checks, output, figures)
    seen = [r for r in req.get("live") or () if isinstance(r, dict) and r.get("path") != output]
    check_live_runs(
        checks, config, gpus, req.get("runs") or [], after, bool(req.get("force")), seen
    )
    return {
        "passed": all(c["ok"] for c in checks),
        "checks": checks,
        "estimate": figures,
        "config": config,
        "run_path": output,
        "after": after,
        "resume": resume,
    }


def check_output(
    checks: List[Check], output: str, after: Optional[str], roots: Iterable[str]
) -> bool:
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


def _same_setting(key: str, a: object, b: object) -> bool:
    if (
        key in PATH_KEYS
        and isinstance(a, str)
        and isinstance(b, str)
        and not a.startswith("random:")
    ):
        return os.path.abspath(os.path.expanduser(a)) == os.path.abspath(os.path.expanduser(b))
    return a == b


def resumable(output: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
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


def newest_checkpoint(output: str) -> Optional[Tuple[int, str]]:
    """(step, path) of the newest checkpoint the trainer can resume from (a complete
    `checkpoint-N` by the layout's rule in `<run>/checkpoints/`, with its trainer_state.json),
    or None."""
    done = layout.resumable_checkpoints(output)
    return done[-1] if done else None


def check_resume(checks: List[Check], output: str, config: Dict[str, Any]) -> bool:
    """`--resume`: the output is a stopped or failed run of this same config, with a
    checkpoint to continue from."""
    manifest, why = resumable(output)
    if why:
        return check(checks, "resume", False, why)
    assert manifest is not None  # resumable names a reason whenever it has no run.json
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
    before = manifest.get("config")
    if not isinstance(before, dict):
        before = {}
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
