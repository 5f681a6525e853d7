"""`fleetdeck train RUN.toml`: the trainer's entry point (run folder lifecycle, resume, torchrun).

Exit status: 0 finished (adapter written), 1 refused or failed (run.json says why), 2 bad RUN.toml.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from fleetdeck.backend.fleet.config import ConfigError

from .runconfig import config_to_dict, load_run_config
from .rundir import RunDir, RunRefused, corpus_sha256, new_manifest, set_state
from .trainlog import TrainLog

if TYPE_CHECKING:
    from types import FrameType

    from .runconfig import RunConfig


class Stopped(Exception):
    """The process was asked to stop (SIGTERM)."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
    raise Stopped("stopped by SIGTERM")


def _torchrun(cfg_path: str, gpus: int) -> int:
    import torch

    have = torch.cuda.device_count()
    # processes on the CPU (gloo) only where asked for explicitly: the tests use it
    if have == 0 and os.environ.get("FLEETDECK_TRAIN_CPU_PROCESSES") == "1":
        have = gpus
    if have < gpus:
        print(
            f"fleetdeck train: RUN.toml asks for gpus = {gpus} but this host has {have} CUDA GPU(s)",
            file=sys.stderr,
        )
        return 1
    env = dict(os.environ, NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE", "0"))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={gpus}",
        "-m",
        "fleetdeck.backend.train.main",
        cfg_path,
    ]
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 1


def train_main(argv: list[str] | None = None) -> int:
    """Run (or resume) the training run RUN.toml describes; returns the exit status."""
    parser = argparse.ArgumentParser(prog="fleetdeck train")
    parser.add_argument("run_toml", metavar="RUN.toml")
    args = parser.parse_args(argv)
    try:
        cfg = load_run_config(args.run_toml)
    except ConfigError as e:
        print(f"fleetdeck train: {e}", file=sys.stderr)
        return 2
    missing = [
        m
        for m in ("torch", "transformers", "peft", "safetensors")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        print(
            f"fleetdeck train: the train extra is missing ({', '.join(missing)}); "
            "install it with: pip install 'fleetdeck[train]'",
            file=sys.stderr,
        )
        return 1
    run = RunDir(Path(cfg.output))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if rank == 0:
        try:
            previous = run.check_reusable()
        except RunRefused as e:
            print(f"fleetdeck train: {e}", file=sys.stderr)
            return 1
    if cfg.gpus > 1 and "LOCAL_RANK" not in os.environ:
        return _torchrun(args.run_toml, cfg.gpus)
    if rank != 0:
        return _train(cfg, run, None, rank, world)
    run.path.mkdir(parents=True, exist_ok=True)
    return _train(cfg, run, previous, rank, world)


def _train(cfg: RunConfig, run: RunDir, previous: dict | None, rank: int, world: int) -> int:
    log = TrainLog(run.log_path if rank == 0 else None, rank)
    manifest: dict = {}
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if rank == 0:
            sha = corpus_sha256(Path(cfg.corpus)) if Path(cfg.corpus).exists() else None
            manifest = new_manifest(previous or {}, config_to_dict(cfg), sha, world)
            set_state(run, manifest, "running")
            log(
                f"fleetdeck train {cfg.source} -> {run.path} (pid {os.getpid()}, {world} process(es))"
            )
        from .session import run_training

        adapter, final_eval = run_training(cfg, run, rank, world, log)
        if rank == 0:
            set_state(
                run,
                manifest,
                "finished",
                adapter=str(adapter),
                final_eval_loss=final_eval,
                finished_time=time.time(),
            )
            log(f"finished: adapter in {adapter}")
        return 0
    except BaseException as e:  # noqa: BLE001 - every way out is recorded in run.json
        expected, message = describe_error(e)
        if not expected:
            log.write(traceback.format_exc())
        if rank == 0:
            try:
                set_state(run, manifest, "failed", error=message, failed_time=time.time())
            except OSError:
                pass
            print(
                f"fleetdeck train: {message}"
                + ("" if expected else f" (traceback in {run.log_path})"),
                file=sys.__stderr__,
            )
        log.write(f"failed: {message}\n")
        return 1
    finally:
        log.close()
        _shutdown_dist()


def describe_error(e: BaseException) -> tuple[bool, str]:
    from .corpus import CorpusError
    from .models import ModelError
    from .recipe import RecipeError

    expected_types: tuple[type[BaseException], ...] = (
        CorpusError,
        ModelError,
        RecipeError,
        Stopped,
        RunRefused,
    )
    try:
        from .lora import TargetError

        expected_types += (TargetError,)
    except ImportError:
        pass
    if isinstance(e, KeyboardInterrupt):
        return True, "interrupted"
    if isinstance(e, expected_types):
        return True, str(e)
    if isinstance(e, ImportError):
        return True, f"the train extra is missing ({e}); install fleetdeck[train]"
    if type(e).__name__ == "OutOfMemoryError":
        return True, "out of GPU memory (lower micro_batch or set gradient_checkpointing = true)"
    text = str(e).strip().splitlines()
    return False, f"{type(e).__name__}: {text[0] if text else 'no message'}"


def _shutdown_dist() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


if __name__ == "__main__":
    sys.exit(train_main())
