"""One training run from data to adapter: load, plan, resume, step, eval, save (rank 0 writes)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from . import recipe
from .corpus import build_splits, corpus_facts, describe_facts, read_documents
from .engine_state import load_checkpoint, save_checkpoint
from .loop import Engine, StepSchedule, total_steps
from .models import load_tokenizer
from .rundir import RunDir

if TYPE_CHECKING:
    from collections.abc import Callable

    from .corpus import Split
    from .runconfig import RunConfig


def device_for(rank_local: int) -> torch.device:
    """This process's GPU, or the CPU."""
    if torch.cuda.is_available():
        torch.cuda.set_device(rank_local)
        return torch.device("cuda", rank_local)
    return torch.device("cpu")


def init_distributed(world: int) -> torch.device:
    """Join the torchrun group (NCCL on GPUs, gloo on CPU) and return this process's device."""
    device = device_for(int(os.environ.get("LOCAL_RANK", "0")))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def prepare(
    cfg: RunConfig, rank: int, world: int, log: Callable[..., object]
) -> tuple[Engine, Split, Split | None, StepSchedule]:
    """(engine, train split, eval split, schedule) for `cfg`, the recipe chosen."""
    device = init_distributed(world)
    torch.manual_seed(cfg.seed)
    tok = load_tokenizer(cfg.base_model, cfg.tokenizer)
    docs = read_documents(Path(cfg.corpus))
    engine = Engine(cfg, device, rank, world, log)
    train, held = build_splits(docs, tok, cfg.seq_len, engine.packing, cfg.eval_fraction, cfg.seed)
    engine.corpus_facts = corpus_facts(
        docs, train.tokens, tok, _sha256(cfg.corpus) if rank == 0 else None
    )
    if rank == 0:
        log(describe_facts(engine.corpus_facts))
        for w in engine.corpus_facts["warnings"]:
            log(f"warning: {w}")
    packing = (
        "on"
        if engine.packing
        else (
            f"off ({engine.recipe.packing_off.split(';')[0]})"
            if engine.recipe.packing_off
            else "off"
        )
    )
    log(
        f"corpus: {len(docs)} documents, {len(train.rows)} train rows ({train.real_tokens} tokens), "
        f"{len(held.rows) if held else 0} eval rows; seq_len {cfg.seq_len}, packing {packing}"
    )
    if tok.vocab_size > engine.shapes.vocab:
        from .models import ModelError

        raise ModelError(
            f"the tokenizer has {tok.vocab_size} tokens but the model's vocabulary only "
            f"{engine.shapes.vocab}; give a matching tokenizer"
        )
    log(engine.plan.summary())
    log(f"trainable parameters {engine.n_lora:,}; frozen matmul parameters {engine.n_matmul:,}")
    schedule = StepSchedule(len(train.rows), cfg.rows_per_step, world, cfg.seed)
    engine.max_steps = total_steps(cfg, len(train.rows), world)
    recipe.choose(engine, train, schedule.rows(0, rank), log)
    return engine, train, held, schedule


def _sha256(corpus: str) -> str | None:
    from .rundir import corpus_sha256

    try:
        return corpus_sha256(Path(corpus))
    except OSError:
        return None


def _trainer_state(
    engine: Engine, step: int, history: list, best: tuple | None, schedule: StepSchedule
) -> dict:
    return {
        "global_step": step,
        "max_steps": engine.max_steps,
        "epoch": schedule.epoch_at(step),
        "eval_steps": engine.cfg.eval_steps,
        "save_steps": engine.cfg.save_steps,
        "logging_steps": engine.cfg.logging_steps,
        "train_batch_size": engine.cfg.batch_size,
        "best_metric": best[0] if best else None,
        "best_model_checkpoint": best[1] if best else None,
        "log_history": history,
    }


def run_training(
    cfg: RunConfig, run: RunDir, rank: int, world: int, log: Callable[..., object]
) -> tuple[Path, float | None]:
    """Train to max_steps (resuming from the newest checkpoint) and write the final adapter."""
    engine, train, held, schedule = prepare(cfg, rank, world, log)
    if rank == 0:
        manifest = run.read_manifest()
        manifest.update(
            lora={
                "adapted_modules": len(engine.plan.modules),
                "per_target": engine.plan.per_target,
                "per_layer_type": engine.plan.per_layer_type,
                "skipped_tower_modules": len(engine.plan.skipped_tower),
                "trainable_parameters": engine.n_lora,
            },
            recipe=recipe.line(engine),
            max_steps=engine.max_steps,
            packing={
                "requested": cfg.packing,
                "used": engine.packing,
                "reason": engine.recipe.packing_off,
            },
            corpus=engine.corpus_facts,
            train_rows=len(train.rows),
            eval_rows=len(held.rows) if held else 0,
        )
        run.write_manifest(manifest)
    history: list[dict] = []
    best: tuple | None = None
    start = 0
    newest = run.newest_checkpoint()
    if newest is not None:
        state = load_checkpoint(engine, newest[1])
        start = int(state["global_step"])
        history = list(state.get("log_history", []))
        if state.get("best_metric") is not None:
            best = (state["best_metric"], state.get("best_model_checkpoint"))
        log(f"resuming from {newest[1].name} (step {start} of {engine.max_steps})")
    if rank == 0:
        run.truncate_progress(start)
    log(
        f"training {engine.max_steps} steps of {cfg.rows_per_step * world} rows "
        f"({cfg.rows_per_step * world * cfg.seq_len} tokens at most)"
    )
    eval_loss = None
    for step in range(start, engine.max_steps):
        t0 = time.perf_counter()
        upcoming = schedule.rows(step + 1, rank) if step + 1 < engine.max_steps else None
        loss, tokens, _ = engine.step(train, schedule.rows(step, rank), upcoming)
        dt = time.perf_counter() - t0
        done = step + 1
        lr = engine.last_lr
        eval_loss = None
        last = done == engine.max_steps
        if held is not None and (done % cfg.eval_steps == 0 or last):
            eval_loss = engine.evaluate(held)
        entry = {
            "step": done,
            "loss": round(loss, 6),
            "learning_rate": lr,
            "epoch": schedule.epoch_at(done),
        }
        history.append(entry)
        if eval_loss is not None:
            history.append(
                {"step": done, "eval_loss": round(eval_loss, 6), "epoch": schedule.epoch_at(done)}
            )
            if best is None or eval_loss < best[0]:
                best = (eval_loss, str(run.checkpoints_dir / f"checkpoint-{done}"))
        if rank == 0 and (done % cfg.logging_steps == 0 or eval_loss is not None or last):
            run.append_progress(
                {
                    "step": done,
                    "max_steps": engine.max_steps,
                    "loss": round(loss, 6),
                    "lr": lr,
                    "eval_loss": None if eval_loss is None else round(eval_loss, 6),
                    "seconds_per_step": round(dt, 4),
                    "tokens_per_second": round(tokens * world / dt, 1),
                    "time": time.time(),
                }
            )
            log(
                f"step {done}/{engine.max_steps} loss {loss:.4f} lr {lr:.3g}"
                + (f" eval_loss {eval_loss:.4f}" if eval_loss is not None else "")
                + f" {dt:.3f} s/step {tokens * world / dt:,.0f} tok/s"
            )
        if done % cfg.save_steps == 0 or last:
            _save_checkpoint(
                engine, run, done, _trainer_state(engine, done, history, best, schedule), rank, log
            )
    adapter = run.adapter_dir
    if rank == 0:
        tmp = run.path / ".adapter.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        engine.save_adapter(tmp)
        os.replace(tmp, adapter)
    _barrier(world)
    return adapter, eval_loss


def _save_checkpoint(
    engine: Engine, run: RunDir, step: int, state: dict, rank: int, log: Callable[..., object]
) -> None:
    if rank == 0:
        final = run.checkpoints_dir / f"checkpoint-{step}"
        tmp = run.checkpoints_dir / f".checkpoint-{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_checkpoint(engine, tmp, state)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        log(f"saved {final}")
    _barrier(world=engine.world)


def _barrier(world: int) -> None:
    if world > 1 and dist.is_initialized():
        dist.barrier()


__all__ = ["prepare", "run_training", "init_distributed"]
