"""The timed Trainer steps every reference shares, fleetdeck's and the Unsloth peer's alike: a
`StepClock` counts what each micro-batch really fed (`lengths_of`: real tokens and squared piece
lengths, never padding) and times each optimizer step after the warm-up, synchronising the card
at both ends; `counting_trainer` wraps a Trainer class so that it reports its feeds to the
clock; `run_trainer` runs the plain transformers Trainer for the in-process references."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .runconfig import RunConfig


class StepClock:
    """Each timed step's seconds, real tokens and sum of squared piece lengths; steps up to
    `skip` (the warm-up) are not kept, and the card's peak memory restarts at the first kept."""

    def __init__(self, skip: int, cuda: bool, lengths_of: Callable[[dict], list[int]]):
        self.skip, self.cuda, self.lengths_of = skip, cuda, lengths_of
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.attn_sq: list[int] = []
        self._fed = [0, 0]
        self._t0 = 0.0

    def restart(self, skip: int) -> None:
        """Forget every kept step and keep those after step `skip` from now on."""
        self.times.clear()
        self.tokens.clear()
        self.attn_sq.clear()
        self.skip = skip

    def rate(self) -> float | None:
        """Tokens per second over the kept steps; None when none was kept."""
        return sum(self.tokens) / sum(self.times) if self.times else None

    def fed(self, inputs: dict) -> None:
        lengths = self.lengths_of(inputs)
        self._fed[0] += sum(lengths)
        self._fed[1] += sum(n * n for n in lengths)

    def step_begins(self, step: int) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            if step == self.skip:
                torch.cuda.reset_peak_memory_stats()
        self._t0 = time.perf_counter()

    def step_ends(self, step: int) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        if step > self.skip:
            self.times.append(time.perf_counter() - self._t0)
            self.tokens.append(self._fed[0])
            self.attn_sq.append(self._fed[1])
        self._fed = [0, 0]

    def callback(self) -> Any:
        """A TrainerCallback that feeds the step boundaries to this clock."""
        # deferred: transformers (seconds at start-up; the bench imports this module lazily too)
        from transformers import TrainerCallback

        clock = self

        class Timer(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock.step_begins(state.global_step)

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock.step_ends(state.global_step)

        return Timer()


def counting_trainer(base: type, clock: StepClock) -> type:
    """`base` (a Trainer class) reporting each micro-batch it trains on to `clock`."""

    class Counting(base):
        def training_step(self, model: Any, inputs: Any, *a: Any, **kw: Any) -> Any:
            clock.fed(inputs)
            return super().training_step(model, inputs, *a, **kw)

    return Counting


def run_trainer(
    trainer_cls: type,
    model: Any,
    dataset: Any,
    cfg: RunConfig,
    batch: int,
    accum: int,
    checkpointing: bool,
    steps: int,
    cuda: bool,
    collator: Any,
    clock: StepClock,
    liger: bool,
    announce: tuple[Callable[[str], object], str] | None,
) -> None:
    """`steps` optimizer steps of the plain Trainer on `dataset`, timed by `clock`; `announce`
    (log, message) is said once the Trainer is built."""
    # deferred: transformers (seconds at start-up)
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accum,
            max_steps=steps,
            learning_rate=cfg.lr,
            bf16=cuda,
            gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            dataloader_num_workers=0,
            seed=cfg.seed,
            remove_unused_columns=False,
            disable_tqdm=True,
            use_cpu=not cuda,
            use_liger_kernel=liger,
        )
        trainer = trainer_cls(
            model=model,
            args=args,
            train_dataset=dataset,
            callbacks=[clock.callback()],
            data_collator=collator,
        )
        if announce:
            announce[0](announce[1])
        try:
            trainer.train()
        finally:
            trainer.model = trainer.model_wrapped = trainer.optimizer = trainer.lr_scheduler = None
            del trainer
