"""The run layout: what makes a folder a run, its checkpoints, its final adapter, its freshness.

One rule each, used by the probe, purge, launch and the trainer:

- a **run** is a folder (directly under a `runs` root) holding one of RUN_MARKERS or a
  `checkpoint-<step>` folder (for the probe's listing, a trainer's log too: LOG_MARKERS);
- its **checkpoints** are real `checkpoint-<step>` folders in `<run>/checkpoints/` (fleetdeck)
  or in `<run>/` itself (Hugging Face's Trainer). The whole name must match (a trailing newline
  does not), and a step past 2**63 - 1 is not a step (`odd_checkpoint_names` names both kinds);
- a checkpoint is **complete** when it holds what it is for: a real (not a symlink) folder with
  a whole `adapter_model.safetensors` and a regular `adapter_config.json` (a LoRA checkpoint),
  or a full model's whole weights (`model.safetensors`, `pytorch_model.bin`, or every shard an
  index names) with its `config.json`. Whole is judged by the bytes (`weights.py`: the header,
  the offsets, the file's end, no hole), never by a non-zero size. A save killed half-way (say
  `trainer_state.json` only) is **incomplete** (`checkpoint_problem` says what it lacks);
- its **final adapter** is a real directory (not a symlink) holding a whole
  `adapter_model.safetensors` and a regular `adapter_config.json`: `<run>/adapter/`, or the run
  folder itself when `Trainer.save_model(output_dir)` wrote them there. A crashed save (config
  only), torn, sparse or zero-byte weights or a symlinked folder or file is not a final adapter;
- a folder is **fresh** for a new run when it is absent, empty, or holds only FRESH_OK files.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Collection, Container, Iterable, Sequence

from fleetdeck.backend.host.lib import files, flags, text, weights

RUN_MARKERS = (
    "run.json",
    "progress.jsonl",
    "trainer_state.json",
    "checkpoints",
    "adapter",
    "adapter_model.safetensors",
)
# \Z, not $: "$" also matches before a trailing newline
CHECKPOINT_RE = re.compile(r"checkpoint-([0-9]+)\Z")
LOOKS_LIKE_CHECKPOINT = re.compile(r"checkpoint-[0-9]")
MAX_STEP = (1 << 63) - 1
FULL_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
FULL_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
MODEL_CONFIG = "config.json"
INDEX_LIMIT = 1 << 24
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
ADAPTER_DIR = "adapter"
# What the trainer and launch accept in an output folder that has not trained yet.
FRESH_OK = ("RUN.toml", "run.json", "train.log", ".fleetdeck-launch.lock")

DIR_FLAGS = flags.DIR


def checkpoint_step(name: str) -> int | None:
    """The step of a `checkpoint-<step>` name (the whole name, a step of at most 2**63 - 1), or
    None."""
    m = CHECKPOINT_RE.match(name)
    if not m or len(m.group(1)) > 19:
        return None
    step = int(m.group(1))
    return step if step <= MAX_STEP else None


def looks_like_checkpoint(name: str) -> bool:
    """True for any name a reader could take for a checkpoint (`checkpoint-<digits>...`), a
    real step or not: what purge treats as a checkpoint component, to be safe."""
    return bool(LOOKS_LIKE_CHECKPOINT.match(name))


def odd_checkpoint_names(names: Iterable[str]) -> list[tuple[str, str]]:
    """The names that look like `checkpoint-<step>` but are not checkpoints (trailing bytes
    after the digits, a step past 2**63 - 1), each with why: [(name, why)]."""
    out = []
    for n in sorted(names):
        if looks_like_checkpoint(n) and checkpoint_step(n) is None:
            out.append(
                (
                    n,
                    "its step is past 2**63 - 1"
                    if CHECKPOINT_RE.match(n)
                    else "it is not a whole checkpoint-<step> name",
                )
            )
    return out


#: a trainer's log: what marks a run started by hand before its first save (`nohup python
#: train.py > train.log`), for the probe's listing only (an output folder that holds one is still
#: fresh for a launch: FRESH_OK)
LOG_MARKERS = ("train.log", "nohup.out")


def is_run(names: Iterable[str], logs: bool = False) -> bool:
    """True when a folder listing `names` is a run (with `logs`, a trainer's log marks one too)."""
    names = set(names)
    return (
        bool(names.intersection(RUN_MARKERS))
        or (logs and bool(names.intersection(LOG_MARKERS)))
        or any(checkpoint_step(n) is not None for n in names)
    )


def _file_problem(dir_fd: int, name: str, need_bytes: bool) -> str | None:
    """Why `name` in the open folder is not a regular file (with bytes, if `need_bytes`), or None."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return "it holds no %s" % name
        return "%s cannot be read: %s" % (name, e.strerror)
    if not stat.S_ISREG(st.st_mode):
        return "%s is not a regular file" % name
    if need_bytes and st.st_size == 0:
        return "%s is empty (0 bytes)" % name
    return None


def adapter_problem_at(dir_fd: int) -> str | None:
    """Why the open folder `dir_fd` is not a final adapter, or None when it is one: its weights
    must be a whole safetensors file (`weights.file_problem`: judged by its bytes), its config a
    regular file (neither a link)."""
    return weights.file_problem(dir_fd, WEIGHTS) or _file_problem(dir_fd, CONFIG, False)


def adapter_problem(path: str) -> str | None:
    """Why `path` is not a final adapter folder, or None when it is one (never follows a link
    at its last component)."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as e:
        # O_DIRECTORY|O_NOFOLLOW on a symlink to a folder fails with ENOTDIR on Linux, not ELOOP
        if e.errno == errno.ELOOP or e.errno == errno.ENOTDIR and os.path.islink(path):
            return "it is a symlink"
        if e.errno == errno.ENOENT:
            return "it does not exist"
        if e.errno == errno.ENOTDIR:
            return "it is not a directory"
        return "it cannot be opened: %s" % e.strerror
    try:
        return adapter_problem_at(fd)
    finally:
        os.close(fd)


def _index_problem(dir_fd: int, name: str) -> str | None:
    """Why the sharded weights an index names are not all there and whole (`weights`), or
    None."""
    why = _file_problem(dir_fd, name, True)
    if why:
        return why
    try:
        raw = files.read_regular(name, INDEX_LIMIT, dir_fd=dir_fd)[0]
    except OSError as e:
        if e.errno == errno.EFBIG:
            return "%s is larger than %d bytes" % (name, INDEX_LIMIT)
        return "%s cannot be read as a weight index" % name
    return weights.index_problem(dir_fd, name, raw)


def full_model_problem_at(dir_fd: int, names: Container[str]) -> str | None:
    """Why the open folder holds no full model (whole weights plus config.json), or None."""
    why = None
    for w in FULL_WEIGHTS:
        if w in names:
            why = weights.file_problem(dir_fd, w)
            if why is None:
                break
    else:
        idx = next((i for i in FULL_INDEXES if i in names), None)
        why = _index_problem(dir_fd, idx) if idx else "it holds no model weights"
    return why or _file_problem(dir_fd, MODEL_CONFIG, False)


def checkpoint_problem_at(dir_fd: int) -> str | None:
    """Why the open checkpoint folder is not complete ("incomplete: trainer_state.json only"),
    or None when it holds a LoRA adapter's weights and config, or a full model's."""
    try:
        names = os.listdir(dir_fd)
    except OSError as e:
        return "it cannot be listed: %s" % e.strerror
    if adapter_problem_at(dir_fd) is None or full_model_problem_at(dir_fd, names) is None:
        return None
    if not names:
        return "incomplete: empty"
    if WEIGHTS in names:
        return "incomplete: %s" % adapter_problem_at(dir_fd)
    if any(n in names for n in FULL_WEIGHTS + FULL_INDEXES):
        return "incomplete: %s" % full_model_problem_at(dir_fd, names)
    if len(names) <= 3:
        return "incomplete: %s only" % ", ".join(text.shown(n) for n in sorted(names))
    return "incomplete: no %s or model weights among its %d entries" % (WEIGHTS, len(names))


def checkpoint_problem(path: str) -> str | None:
    """Why the checkpoint folder at `path` is not complete, or None (a symlinked folder is not
    one)."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP or e.errno == errno.ENOTDIR and os.path.islink(path):
            return "it is a symlink"
        return "it cannot be opened: %s" % e.strerror
    try:
        return checkpoint_problem_at(fd)
    finally:
        os.close(fd)


def complete_checkpoints(run: str, names: Collection[str] | None = None) -> list[tuple[int, str]]:
    """[(step, path)] of the run's complete checkpoints, oldest first."""
    return [(s, p) for s, p in checkpoints(run, names) if checkpoint_problem(p) is None]


def resumable_checkpoints(run: str) -> list[tuple[int, str]]:
    """[(step, path)] of the checkpoints a run resumes from, oldest first: complete ones in
    `<run>/checkpoints/` (where the trainer saves) that hold their trainer_state.json."""
    inside = os.path.join(run, "checkpoints")
    return [
        (s, p)
        for s, p in complete_checkpoints(run)
        if os.path.dirname(p) == inside and os.path.isfile(os.path.join(p, "trainer_state.json"))
    ]


def final_adapter(run: str) -> str | None:
    """The run's final adapter folder (`<run>/adapter`, else `<run>` itself), or None."""
    sub = os.path.join(run, ADAPTER_DIR)
    if adapter_problem(sub) is None:
        return sub
    if adapter_problem(run) is None:
        return run
    return None


def final_adapter_problem(run: str) -> str | None:
    """Why the run has no final adapter (one sentence), or None when it has one."""
    sub = os.path.join(run, ADAPTER_DIR)
    why = adapter_problem(sub)
    if why is None or adapter_problem(run) is None:
        return None
    if os.path.lexists(sub):
        return "%s/: %s" % (ADAPTER_DIR, why)
    return "no %s/ folder and no adapter at the run root" % ADAPTER_DIR


def checkpoints(run: str, names: Collection[str] | None = None) -> list[tuple[int, str]]:
    """[(step, path)] of the run's real checkpoint folders, oldest first."""
    if names is None:
        try:
            names = os.listdir(run)
        except OSError:
            return []
    found = []
    for base, listing in ((run, names), (os.path.join(run, "checkpoints"), None)):
        if listing is None:
            if "checkpoints" not in names:
                continue
            try:
                listing = os.listdir(base)
            except OSError:
                continue
        for n in listing:
            step = checkpoint_step(n)
            p = os.path.join(base, n)
            if step is not None:
                try:
                    if stat.S_ISDIR(os.lstat(p).st_mode):
                        found.append((step, p))
                except OSError:
                    pass
    return sorted(found)


def run_of(comps: Sequence[str]) -> Sequence[str] | None:
    """The run folder (as components) that a path's components lie in, judged by its
    checkpoint components: the folder above `checkpoints/` or above `checkpoint-N`; None."""
    for i, c in enumerate(comps):
        if c == "checkpoints":
            return comps[:i]
        if looks_like_checkpoint(c):
            return comps[: i - 1] if i > 0 and comps[i - 1] == "checkpoints" else comps[:i]
    return None


# What a trainer that stopped before writing run.json may have left, and may pick up again.
RESUMABLE_OK = FRESH_OK + ("checkpoints", "progress.jsonl")


def not_fresh(names: Iterable[str], resumable: bool = False) -> list[str]:
    """The entries that make a folder listing unfit for a new run (sorted; hidden names are
    never counted). `resumable`: the trainer's own leftovers (checkpoints, progress) are fine."""
    ok = RESUMABLE_OK if resumable else FRESH_OK
    return sorted(n for n in names if n not in ok and not n.startswith("."))


def resolve_run(given: object, roots: Iterable[object] | None) -> str:
    """The run folder a person names, one rule for every command: an absolute path or one under
    `~` (taken as it is), else a folder name or a path relative to one of the runs `roots`
    (`run-8`, `sweep/run-8`). Raises LookupError(code, sentence): `no-run` when nothing answers,
    saying what was looked for and where; `ambiguous-run` when two roots hold it, naming both."""
    run = given if isinstance(given, str) else ""
    if not run:
        raise LookupError("no-run", "no run named")
    if os.path.isabs(run) or run.startswith("~"):
        path = os.path.expanduser(run)
        if os.path.isdir(path):
            return path.rstrip("/") or "/"
        raise LookupError("no-run", "%s is not a folder on this host" % text.shown(run))
    parts = [p for p in run.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise LookupError(
            "no-run",
            "a run is a folder name, a path under a runs root or an absolute path, "
            "not %s" % text.shown(run),
        )
    found = []
    for root in roots or []:
        path = os.path.join(os.path.expanduser(str(root)), *parts)
        if os.path.isdir(path) and path not in found:
            found.append(path)
    if len(found) == 1:
        return found[0]
    if found:
        raise LookupError(
            "ambiguous-run",
            "%s names %d run folders: %s; give its path"
            % (text.shown(run), len(found), ", ".join(text.shown(p) for p in found)),
        )
    raise LookupError(
        "no-run",
        "no run folder %s under %s"
        % (text.shown(run), ", ".join(text.shown(str(r)) for r in roots or []) or "any runs root"),
    )
