"""The run folder the contract fixes: run.json, progress.jsonl, train.log, checkpoints, adapter.

Stdlib only, so the watchers and `launch` can share these rules. Files that others read while a
run is live (run.json, trainer_state.json) are written to a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from fleetdeck.backend.host.lib import hashing, procfs
from fleetdeck.backend.host.lib.layout import final_adapter, not_fresh, resumable_checkpoints

LIVE_STATES = ("running",)


class RunRefused(Exception):
    """The run folder cannot be (re)used: finished, live elsewhere, or not a run."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old or the new file, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def process_start_time(pid: int | str = "self") -> tuple[int | None, float | None]:
    """(start ticks since boot, start as epoch seconds) of `pid`, from the host library."""
    ticks = procfs.start_ticks(os.getpid() if pid == "self" else int(pid))
    return (ticks, procfs.started_at(ticks)) if ticks is not None else (None, None)


def pid_alive(pid: int, start_ticks: int | None) -> bool:
    """True when the process a manifest names may still run: the same process (pid and start
    time, the host library's identity rule); a pid recorded without its start time counts as
    alive while that pid exists, since refusing a second start is the safe side here."""
    if start_ticks is None:
        return procfs.alive(pid)
    return procfs.same_process(pid, start_ticks)


def sha256_file(path: Path) -> str:
    """The sha256 of one file (a corpus may be a symlink: it is followed), streamed."""
    with open(path, "rb") as f:
        return hashing.sha256_fd(f.fileno())[0]


def corpus_sha256(path: Path) -> str:
    """sha256 of the corpus file, or of a folder's files (names and bytes, sorted by name)."""
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(str(p.relative_to(path)).encode() + b"\0" + sha256_file(p).encode())
    return h.hexdigest()


@dataclass
class RunDir:
    """One run folder and the manifest kept in it."""

    path: Path

    @property
    def manifest_path(self) -> Path:
        return self.path / "run.json"

    @property
    def progress_path(self) -> Path:
        return self.path / "progress.jsonl"

    @property
    def log_path(self) -> Path:
        return self.path / "train.log"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def adapter_dir(self) -> Path:
        return self.path / "adapter"

    def read_manifest(self) -> dict:
        """run.json as a dict; {} when absent; RunRefused when unreadable."""
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise RunRefused(
                f"{self.manifest_path} cannot be read ({e}); refusing to touch the run"
            ) from None

    def write_manifest(self, manifest: dict) -> None:
        """Write run.json atomically."""
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def check_reusable(self) -> dict:
        """The existing manifest if this folder may be (re)started; RunRefused saying why not."""
        if self.path.exists() and not self.path.is_dir():
            raise RunRefused(f"output {self.path} exists and is not a folder")
        manifest = self.read_manifest() if self.path.is_dir() else {}
        if final_adapter(str(self.path)) is not None or manifest.get("state") == "finished":
            raise RunRefused(
                f"run {self.path} already finished (it has its final adapter); "
                "refusing to overwrite it: choose another output folder"
            )
        if manifest.get("state") in LIVE_STATES and manifest.get("pid") not in (None, os.getpid()):
            if pid_alive(int(manifest["pid"]), manifest.get("start_ticks")):
                raise RunRefused(
                    f"run {self.path} is live (pid {manifest['pid']}); refusing to start it twice"
                )
        if self.path.is_dir() and not manifest:
            foreign = not_fresh(os.listdir(self.path), resumable=True)
            if foreign:
                raise RunRefused(
                    f"output {self.path} holds files that are not a fleetdeck run "
                    f"({', '.join(sorted(foreign)[:3])}); choose an empty or new folder"
                )
        return manifest

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Checkpoints a run resumes from, oldest first: complete by the layout's one rule
        (weights and config) and holding trainer_state.json; a save killed half-way is not one."""
        return [(step, Path(p)) for step, p in resumable_checkpoints(str(self.path))]

    def newest_checkpoint(self) -> tuple[int, Path] | None:
        """The newest complete checkpoint, or None."""
        cps = self.checkpoints()
        return cps[-1] if cps else None

    def truncate_progress(self, last_step: int) -> None:
        """Drop progress lines past `last_step` (a resumed run repeats those steps)."""
        if not self.progress_path.exists():
            return
        kept = []
        for line in self.progress_path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= last_step:
                    kept.append(line)
            except ValueError:
                continue
        atomic_write_text(self.progress_path, "".join(k + "\n" for k in kept))

    def append_progress(self, record: dict) -> None:
        """Append one line to progress.jsonl (one write call, so a reader never sees half a line)."""
        with open(self.progress_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


#: run.json keys each (re)starting trainer process writes afresh
RECOMPUTED = (
    "lora",
    "recipe",
    "packing",
    "corpus",
    "max_steps",
    "train_rows",
    "eval_rows",
    "adapter",
    "final_eval_loss",
    "finished_time",
    "failed_time",
)


def new_manifest(previous: dict, config: dict, corpus_sha: str | None, world_size: int) -> dict:
    """run.json for a starting (or resuming) process, keeping keys others wrote (e.g. launch)."""
    ticks, started = process_start_time()
    # what this process measures again (and writes while it runs) must not be overwritten at the
    # end by an earlier attempt's values
    manifest = {k: v for k, v in previous.items() if k not in RECOMPUTED}
    manifest.update(
        {
            "config": config,
            "corpus_sha256": corpus_sha,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "start_ticks": ticks,
            "start_time": started if started is not None else time.time(),
            "world_size": world_size,
            "error": None,
        }
    )
    manifest.setdefault("states", [])
    return manifest


def set_state(run: RunDir, manifest: dict, state: str, **extra: object) -> None:
    """Record a state transition (with its time) in run.json, keeping keys written there since."""
    try:
        on_disk = run.read_manifest()
    except RunRefused:
        on_disk = {}
    # keys the training process writes while it runs are taken from disk, never from this
    # (possibly older) copy; `extra` sets them explicitly
    merged = {**on_disk, **{k: v for k, v in manifest.items() if k not in RECOMPUTED}}
    merged["state"] = state
    merged.update(extra)
    merged["states"] = [
        *manifest.get("states", []),
        {"state": state, "time": time.time(), "pid": os.getpid()},
    ]
    manifest.clear()
    manifest.update(merged)
    run.write_manifest(manifest)


__all__ = [
    "RunDir",
    "RunRefused",
    "atomic_write_text",
    "corpus_sha256",
    "new_manifest",
    "set_state",
    "process_start_time",
    "pid_alive",
    "sha256_file",
]
