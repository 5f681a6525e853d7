"""The run layout: what makes a folder a run, its checkpoints, its final adapter, its freshness.

One rule each, used by the probe, purge, launch and the trainer:

- a **run** is a folder (directly under a `runs` root) holding one of RUN_MARKERS or a
  `checkpoint-<step>` folder;
- its **checkpoints** are real `checkpoint-<step>` folders in `<run>/checkpoints/` (fleetdeck)
  or in `<run>/` itself (Hugging Face's Trainer);
- its **final adapter** is a real directory (not a symlink) holding a non-empty regular
  `adapter_model.safetensors` and a regular `adapter_config.json`: `<run>/adapter/`, or the run
  folder itself when `Trainer.save_model(output_dir)` wrote them there. A crashed save (config
  only), zero-byte weights or a symlinked folder or file is not a final adapter;
- a folder is **fresh** for a new run when it is absent, empty, or holds only FRESH_OK files.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import os
import re
import stat

from fleetdeck.backend.host.lib import flags

RUN_MARKERS = ("run.json", "progress.jsonl", "trainer_state.json", "checkpoints", "adapter",
               "adapter_model.safetensors")
CHECKPOINT_RE = re.compile(r"^checkpoint-([0-9]+)$")
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
ADAPTER_DIR = "adapter"
# What the trainer and launch accept in an output folder that has not trained yet.
FRESH_OK = ("RUN.toml", "run.json", "train.log", ".fleetdeck-launch.lock")

DIR_FLAGS = flags.DIR


def checkpoint_step(name):
    """The step of a `checkpoint-<step>` name, or None."""
    m = CHECKPOINT_RE.match(name)
    return int(m.group(1)) if m else None


def is_run(names):
    """True when a folder listing `names` is a run."""
    names = set(names)
    return bool(names.intersection(RUN_MARKERS)) or any(CHECKPOINT_RE.match(n) for n in names)


def _file_problem(dir_fd, name, need_bytes):
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


def adapter_problem_at(dir_fd):
    """Why the open folder `dir_fd` is not a final adapter, or None when it is one: its weights
    must be a non-empty regular file, its config a regular file (neither a link)."""
    return _file_problem(dir_fd, WEIGHTS, True) or _file_problem(dir_fd, CONFIG, False)


def adapter_problem(path):
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


def final_adapter(run):
    """The run's final adapter folder (`<run>/adapter`, else `<run>` itself), or None."""
    sub = os.path.join(run, ADAPTER_DIR)
    if adapter_problem(sub) is None:
        return sub
    if adapter_problem(run) is None:
        return run
    return None


def final_adapter_problem(run):
    """Why the run has no final adapter (one sentence), or None when it has one."""
    sub = os.path.join(run, ADAPTER_DIR)
    why = adapter_problem(sub)
    if why is None or adapter_problem(run) is None:
        return None
    if os.path.lexists(sub):
        return "%s/: %s" % (ADAPTER_DIR, why)
    return "no %s/ folder and no adapter at the run root" % ADAPTER_DIR


def checkpoints(run, names=None):
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


def run_of(comps):
    """The run folder (as components) that a path's components lie in, judged by its
    checkpoint components: the folder above `checkpoints/` or above `checkpoint-N`; None."""
    for i, c in enumerate(comps):
        if c == "checkpoints":
            return comps[:i]
        if CHECKPOINT_RE.match(c):
            return comps[:i - 1] if i > 0 and comps[i - 1] == "checkpoints" else comps[:i]
    return None


# What a trainer that stopped before writing run.json may have left, and may pick up again.
RESUMABLE_OK = FRESH_OK + ("checkpoints", "progress.jsonl")


def not_fresh(names, resumable=False):
    """The entries that make a folder listing unfit for a new run (sorted; hidden names are
    never counted). `resumable`: the trainer's own leftovers (checkpoints, progress) are fine."""
    ok = RESUMABLE_OK if resumable else FRESH_OK
    return sorted(n for n in names if n not in ok and not n.startswith("."))
