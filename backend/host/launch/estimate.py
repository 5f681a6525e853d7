"""Launch pre-flight estimates, run on the training host (stdlib only, Python 3.8 or newer).

Bundled with `host/launch/main.py` and the host library (`fleetdeck.backend.fleet.link.bundle`). Figures are rough
upper-side estimates, stated in every check message so the operator can judge them:

- parameters P and LoRA parameters L: from the built-in architecture table for `random:<arch>`,
  else from the checkpoint's safetensors headers (exact shapes; L = rank x (in + out) summed over
  every 2-D weight whose module name is a target);
- GPU memory per GPU = P x b (b = 2 for bfloat16, 4 for float32) + L x 16 (fp32 LoRA weight,
  gradient, two Adam moments) + activations + logits + 1 GiB (CUDA context and allocator slack);
  activations per layer A = rows x seq x (12 hidden + 4 intermediate) x b; with gradient
  checkpointing (true or "auto", the trainer's minimum) layers x rows x seq x hidden x b + A,
  without it layers x A; logits = rows x seq x vocab x (2b + 12) (logits, fp32 upcast, softmax
  and gradients); rows = micro_batch (1 if "auto");
- base_fp8 = true adds each LoRA-wrapped projection's float8 copies (train/fp8.py): 2 x out x in
  + 4 x (out + in) bytes a weight (two float8 copies and their float32 scales), for the target
  linears whose sides are multiples of 16 and that have no bias (embeddings and norms have none);
- where the run's memory is the host's (the CPU, or unified memory where the driver reports no
  total, GB10) the corpus the trainer holds counts too: its text (corpus bytes) and its tokens as
  int32 (4 x tokens); the weights are counted once, host and GPU being one memory;
- disk = saves x (L x 12 + 1 MiB) + L x 4 (the adapter) + 1 MiB + steps x 300 B of logs, with
  saves = steps // save_steps and steps = max_steps, else epochs x corpus tokens / (seq_len x
  batch_size x grad_accum x gpus), where tokens = corpus bytes (byte tokenizer of random models)
  or bytes / 3 (a subword tokenizer).
"""

import json
import os
import shutil
import struct
import sys

from fleetdeck.backend.host.launch.shapes import (
    ARCHS,
    arch_shapes,
    checkpoint_shapes,
    fp8_copy_bytes,
    safetensors_header,
)
from fleetdeck.backend.host.lib import procfs, runner, units

GIB = 1 << 30
MIB = 1 << 20
#: the model-shape readers live in shapes.py; these names stay here for the helper and the tests
__all__ = ["ARCHS", "arch_shapes", "checkpoint_shapes", "fp8_copy_bytes", "safetensors_header"]


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


def missing_modules(names, python=None):
    """The module names `python` (default: this interpreter) cannot find. Asked of a fresh
    interpreter, as the trainer will start: inside a helper payload `fleetdeck` is the
    payload's own package, which holds only what the payload carries."""
    r = runner.run([python or sys.executable, "-c", _FIND, *names], timeout=60)
    try:
        out = json.loads(r.out.decode("utf-8", "replace"))
    except ValueError:
        return list(names)
    return [n for n in out if isinstance(n, str)]


def corpus_bytes(path):
    """Bytes of the corpus file, or of every file under a corpus folder; 0 when absent."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


start_ticks = procfs.start_ticks


# -- the modules LoRA adapts -----------------------------------------------------------------
#: the Linear modules of every layer of a built-in (Qwen3-shaped) architecture
ARCH_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def linear_names(base):
    """(the leaf names of the base model's 2-D weights, where they were read), or (None, why)
    when they cannot be known before the model is built (a hybrid built-in, no safetensors)."""
    if base.startswith("random:"):
        arch = base.split(":", 1)[1]
        if arch in ARCHS:
            return set(ARCH_LINEARS), "built-in architecture %s" % arch
        return None, "the architecture %s is known only once it is built" % arch
    files = sorted(f for f in os.listdir(base) if f.endswith(".safetensors"))
    if not files:
        return None, "no safetensors header to read"
    names = set()
    for name in files:
        for tensor, meta in safetensors_header(os.path.join(base, name)).items():
            parts = tensor.split(".")
            if (
                tensor != "__metadata__"
                and len(meta.get("shape") or []) == 2
                and len(parts) >= 2
                and parts[-1] == "weight"
            ):
                names.add(parts[-2])
    return names, "the safetensors headers of %s" % base


def check_targets(checks, config):
    """`target-modules`: every name in target_modules matches a Linear module of the base model
    when its modules can be known now (a built-in architecture, a local safetensors checkpoint);
    otherwise the trainer judges them when it builds the model, and the check says so."""
    targets = list(config.get("target_modules") or ARCH_LINEARS)
    try:
        names, where = linear_names(str(config["base_model"]))
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        names, where = None, "the base model's weights could not be read (%s)" % e
    if names is None:
        return checks.append(
            {
                "name": "target-modules",
                "ok": True,
                "message": "target_modules %s are matched when the model is built (%s)"
                % (", ".join(targets), where),
            }
        )
    # the trainer also takes a module's full dotted name; only a leaf name is judged here
    bad = [t for t in targets if "." not in t and t not in names]
    if bad:
        return checks.append(
            {
                "name": "target-modules",
                "ok": False,
                "message": (
                    "target_modules %s match%s no Linear module of the base model (%s has %s)"
                    % (
                        ", ".join(repr(t) for t in bad),
                        "es" if len(bad) == 1 else "",
                        where,
                        ", ".join(sorted(names)[:12]) or "none",
                    )
                ),
            }
        )
    checks.append(
        {
            "name": "target-modules",
            "ok": True,
            "message": "target_modules %s each match Linear modules (%s)"
            % (", ".join(targets), where),
        }
    )
    return None


# -- the estimate ----------------------------------------------------------------------------
def estimate(config, gpus, corpus_size):
    """Memory and disk the run needs, with the parts that make them up (see the module doc)."""
    targets = set(
        config.get("target_modules")
        or ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    rank = int(config.get("lora_rank", 32))
    base = config["base_model"]
    try:
        if base.startswith("random:"):
            params, lora, dims = arch_shapes(base.split(":", 1)[1], targets, rank)
        else:
            params, lora, dims = checkpoint_shapes(base, targets, rank)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        params, lora, dims = 0, 0, {}
    on_gpu = bool(gpus["gpus"])
    # the run's memory is the host's: no GPU, or GPUs the driver gives no memory of their own
    shared = not on_gpu or any(g["unified"] for g in gpus["gpus"][: int(config.get("gpus", 1))])
    dtype = config.get("dtype", "auto")
    b = 4 if dtype == "float32" or (dtype == "auto" and not on_gpu) else 2
    seq = int(config.get("seq_len", 4096))
    mb = config.get("micro_batch", "auto")
    rows = mb if isinstance(mb, int) and not isinstance(mb, bool) else 1
    parts = {"weights": params * b, "lora_optimizer": lora * 16}
    if dims:
        layer = rows * seq * (12 * dims["hidden"] + 4 * dims["inter"]) * b
        if config.get("gradient_checkpointing", "auto") is False:
            parts["activations"] = dims["layers"] * layer
        else:
            parts["activations"] = dims["layers"] * rows * seq * dims["hidden"] * b + layer
        # logits, their fp32 upcast, softmax and gradients: 16 B per entry at bf16 matches the
        # trainer's own measurement on an H200 (qwen3-0.6b: 10.09 GiB per 4096-token row)
        parts["logits"] = rows * seq * dims["vocab"] * (2 * b + 12)
    if config.get("base_fp8") is True and on_gpu:
        try:
            parts["base_fp8"] = fp8_copy_bytes(base, targets)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
            parts["base_fp8"] = 0
    byte_tok = base.startswith("random:") and not config.get("tokenizer")
    tokens = corpus_size if byte_tok else corpus_size // 3
    if shared:
        parts["corpus"] = corpus_size + 4 * tokens
    parts["overhead"] = GIB if on_gpu else 512 * MIB
    need = sum(parts.values())
    rows_per_step = (
        int(config.get("batch_size", 1))
        * int(config.get("grad_accum", 8))
        * int(config.get("gpus", 1))
    )
    steps = int(config.get("max_steps") or 0)
    if steps <= 0:
        share = 1.0 - float(config.get("eval_fraction", 0.05))
        steps = max(
            1, int(float(config.get("epochs", 1.0)) * tokens * share // (seq * rows_per_step)) + 1
        )
    saves = steps // max(1, int(config.get("save_steps", 25)))
    ckpt = lora * 12 + MIB
    adapter = lora * 4
    disk = saves * ckpt + adapter + MIB + steps * 300
    return {
        "params": params,
        "lora_params": lora,
        "bytes_per_param": b,
        "device": "cuda" if on_gpu else "cpu",
        "unified_memory": on_gpu and shared,
        "memory_bytes": need,
        "memory_parts": parts,
        "shapes_known": bool(dims),
        "steps": steps,
        "saves": saves,
        "checkpoint_bytes": ckpt,
        "adapter_bytes": adapter,
        "disk_bytes": disk,
    }


def parts_text(parts):
    return " + ".join("{} {}".format(k.replace("_", "/"), units.size(v)) for k, v in parts.items())


# -- the host ----------------------------------------------------------------------------------
def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _num(s):
    try:
        return float(s)
    except ValueError:
        return None


def gpu_table():
    """GPUs and their compute processes per nvidia-smi; empty lists when the host has none."""
    smi = shutil.which("nvidia-smi")
    out = {"gpus": [], "apps": [], "error": None}
    if smi is None:
        return out
    r = runner.run(
        [
            smi,
            "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free",
            "--format=csv,noheader,nounits",
        ],
        timeout=20,
    )
    a = runner.run(
        [smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        timeout=20,
    )
    if r.rc in (124, 126, 127):
        out["error"] = "nvidia-smi failed: " + runner.first_line(r.err)
        return out
    host_free = mem_available()
    for line in r.out.decode("utf-8", "replace").splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6 or not f[0].isdigit():
            continue
        total, used, free = _num(f[3]), _num(f[4]), _num(f[5])
        unified = total is None  # unified memory (GB10): the driver reports no total
        if unified:
            free = host_free
        else:
            free = free * MIB if free is not None else None
        out["gpus"].append(
            {"index": int(f[0]), "uuid": f[1], "name": f[2], "unified": unified, "free": free}
        )
    for line in a.out.decode("utf-8", "replace").splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 3 and f[0].isdigit():
            used = _num(f[2])
            out["apps"].append({"pid": int(f[0]), "uuid": f[1], "used": used * MIB if used else 0})
    if r.rc != 0:
        out["error"] = runner.first_line(r.err or r.out) or "nvidia-smi failed"
    return out


def after_pid(after):
    if not after:
        return None
    try:
        with open(os.path.join(after, "run.json"), encoding="utf-8") as f:
            return json.load(f).get("pid")
    except (OSError, ValueError, AttributeError):
        return None


def _add(checks, name, ok, message):
    checks.append({"name": name, "ok": bool(ok), "message": message})


def check_gpus(checks, config, gpus):
    """`gpus = N` against the GPUs this host has: N of them (GPUs 0..N-1), or, without a GPU,
    one process on the CPU (several only where FLEETDECK_TRAIN_CPU_PROCESSES=1 asks the
    trainer for CPU processes, as the tests do)."""
    want = int(config.get("gpus", 1))
    have = len(gpus["gpus"])
    if have:
        return _add(
            checks,
            "gpus",
            want <= have,
            "the run takes {} of this host's {} GPU{} (GPU {})".format(
                want,
                have,
                "" if have == 1 else "s",
                ", ".join(str(g["index"]) for g in gpus["gpus"][:want]),
            )
            if want <= have
            else "RUN.toml asks for gpus = {} and this host has {} GPU{}; set gpus to {} or fewer".format(
                want, have, "" if have == 1 else "s", have
            ),
        )
    why = " ({})".format(gpus["error"]) if gpus["error"] else ""
    if want == 1:
        return _add(
            checks,
            "gpus",
            True,
            f"no GPU on this host{why}: the run trains in one process on the CPU",
        )
    if os.environ.get("FLEETDECK_TRAIN_CPU_PROCESSES") == "1":
        return _add(
            checks,
            "gpus",
            True,
            f"no GPU on this host{why}: the run trains in {want} processes on the "
            "CPU (FLEETDECK_TRAIN_CPU_PROCESSES=1)",
        )
    return _add(
        checks,
        "gpus",
        False,
        f"RUN.toml asks for gpus = {want} and this host has no GPU{why}; "
        "set gpus = 1 to train on its CPU",
    )


def check_memory(checks, config, gpus, est, after):
    """GPU memory (or, without a GPU, system memory) against the estimate."""
    need, why = est["memory_bytes"], parts_text(est["memory_parts"])
    if not est["params"]:
        why += " (model size unknown: weights not counted)"
    if not gpus["gpus"]:
        avail = mem_available()
        note = "no GPU on this host%s: the run trains on CPU" % (
            " ({})".format(gpus["error"]) if gpus["error"] else ""
        )
        if avail is None:
            return _add(checks, "memory", True, f"{note}; memory not checked (no /proc/meminfo)")
        return _add(
            checks,
            "memory",
            avail >= need,
            f"{note} and needs about {units.size(need)} ({why}); {units.size(avail)} available",
        )
    want = int(config.get("gpus", 1))
    if len(gpus["gpus"]) < want:
        return _add(
            checks,
            "memory",
            False,
            f"the run asks for {want} GPUs and this host has {len(gpus['gpus'])}",
        )
    prev = after_pid(after)
    shared = [g for g in gpus["gpus"][:want] if g["unified"]]
    if shared:
        check_unified_memory(checks, shared, gpus["apps"], prev, need, why)
    for g in gpus["gpus"][:want]:
        if g["unified"]:
            continue
        free = g["free"]
        if free is None:
            _add(
                checks,
                "memory",
                True,
                f"GPU {g['index']} reports no free memory figure; not checked",
            )
            continue
        freed = sum(p["used"] for p in gpus["apps"] if p["pid"] == prev and p["uuid"] == g["uuid"])
        total = free + freed
        extra = f" ({units.size(freed)} of it held now by the run it waits for)" if freed else ""
        _add(
            checks,
            "memory",
            total >= need,
            f"GPU {g['index']} has {units.size(total)} free{extra}; "
            f"the run needs about {units.size(need)} ({why})",
        )


def check_unified_memory(checks, shared, apps, prev, need, why):
    """GPUs with no memory of their own (unified memory, GB10) share the host's: one check of
    every process the run starts on them against MemAvailable, read once, each process's weights
    counted once (its host side and its GPU side are the same memory)."""
    names = "GPU{} {}".format(
        "s" if len(shared) > 1 else "", ", ".join(str(g["index"]) for g in shared)
    )
    avail = shared[0]["free"]
    if avail is None:
        return _add(
            checks,
            "memory",
            True,
            f"{names} (unified memory): the host reports no MemAvailable; not checked",
        )
    uuids = {g["uuid"] for g in shared}
    freed = sum(p["used"] for p in apps if p["pid"] == prev and p["uuid"] in uuids)
    extra = f", {units.size(freed)} of it held now by the run it waits for" if freed else ""
    total = need * len(shared)
    each = f"{len(shared)} processes x " if len(shared) > 1 else ""
    _add(
        checks,
        "memory",
        avail + freed >= total,
        f"{names} {'share' if len(shared) > 1 else 'shares'} the host's memory (unified memory): "
        f"{units.size(avail + freed)} available (MemAvailable{extra}); the run needs about {units.size(total)} "
        f"({each}{why}; weights counted once, host and GPU being one memory)",
    )


def check_disk(checks, output, est):
    """Free space on the output's filesystem against checkpoints + adapter + logs."""
    probe = output
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError as e:
        return _add(checks, "disk", False, f"cannot read free space at {probe}: {e}")
    free = st.f_bavail * st.f_frsize
    need = est["disk_bytes"]
    _add(
        checks,
        "disk",
        free >= need,
        f"the run writes about {units.size(need)} ({est['saves']} saves x {units.size(est['checkpoint_bytes'])} "
        f"per checkpoint + {units.size(est['adapter_bytes'])} adapter + logs, for ~{est['steps']} steps); "
        f"{units.size(free)} free at {probe}",
    )


TRAINER_MODULE = "fleetdeck.backend.train"


def trainer_processes():
    """{pid: cwd} of processes running the trainer: `python -m fleetdeck.backend.train` or
    the `fleetdeck train` console script."""
    out = {}
    me = os.getpid()
    for pid in procfs.pids():
        if pid == me:
            continue
        argv = procfs.cmdline(pid)
        hit = any(a == "-m" and argv[i + 1] == TRAINER_MODULE for i, a in enumerate(argv[:-1]))
        hit = hit or any(
            os.path.basename(a) == "fleetdeck" and argv[i + 1] == "train"
            for i, a in enumerate(argv[:-1])
        )
        if hit:
            try:
                out[pid] = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                out[pid] = "?"
    return out


def live_runs(roots, seen=()):
    """{run folder: pid or None} of every run live on this host: those the probe saw running
    (`seen`, fleetdeck's own and others', e.g. a Hugging Face Trainer run), those whose
    run.json says running with that very process alive (pid and start time), and processes
    running the trainer."""
    out = {}
    for r in seen or ():
        if isinstance(r, dict) and r.get("path"):
            pid = r.get("pid")
            out[r["path"]] = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    for root in roots:
        root = os.path.abspath(os.path.expanduser(root))
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for n in names:
            try:
                with open(os.path.join(root, n, "run.json"), encoding="utf-8") as f:
                    m = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(m, dict) and m.get("state") == "running":
                if procfs.same_process(m.get("pid"), m.get("start_ticks")):
                    out[os.path.join(root, n)] = m.get("pid")
    known = set(out.values())
    for pid, cwd in trainer_processes().items():
        if pid not in known:
            out.setdefault(cwd, pid)
    return out


def _run_text(path, pid):
    return f"{path} (pid {pid})" if pid else f"{path} (pid unknown)"


def check_live_runs(checks, config, gpus, roots, after, force, seen=()):
    """No other live run on the GPU(s) this run takes; on a CPU-only host, a note only."""
    runs = live_runs(roots, seen)
    prev = after_pid(after)
    runs = {
        path: pid
        for path, pid in runs.items()
        if not (after and path == after) and not (prev and pid == prev)
    }
    if gpus["gpus"]:
        want = {g["uuid"] for g in gpus["gpus"][: int(config.get("gpus", 1))]}
        on_any = {p["pid"] for p in gpus["apps"]}
        on_ours = {p["pid"] for p in gpus["apps"] if p["uuid"] in want}
        # a run not (yet) on any GPU may still be loading, and one without a pid cannot be
        # placed: count them against ours
        clash = {
            path: pid
            for path, pid in runs.items()
            if pid is None or pid in on_ours or pid not in on_any
        }
        where = "GPU {}".format(
            ", ".join(str(g["index"]) for g in gpus["gpus"][: int(config.get("gpus", 1))])
        )
    else:
        # no GPU to share: CPU runs (tests, tiny models) only compete for cores, so say so and go on
        if not runs:
            return _add(
                checks, "live-run", True, "no GPU on this host, and no other run is live on it"
            )
        desc = ", ".join(_run_text(path, pid) for path, pid in sorted(runs.items())[:3])
        return _add(
            checks, "live-run", True, f"no GPU on this host; {desc} also live here, sharing its CPU"
        )
    if not clash:
        return _add(checks, "live-run", True, f"no other run is live on {where}")
    desc = ", ".join(_run_text(path, pid) for path, pid in sorted(clash.items())[:3])
    if force:
        return _add(
            checks, "live-run", True, f"{desc} live on {where}; --force given, starting anyway"
        )
    _add(
        checks,
        "live-run",
        False,
        "{} {} live on {}; wait for it, or pass --force to share".format(
            desc, "is" if len(clash) == 1 else "are", where
        ),
    )
