"""`fleetdeck train RUN.toml` and `fleetdeck bench RUN.toml`: hand over to the trainer.

The trainer (`fleetdeck.backend.train`, torch and friends) is imported inside the command
functions only, so the dashboard and every other command never load the training stack.
"""

from __future__ import annotations

import argparse
import sys

from fleetdeck.cli.args import add_hosts_option


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `train` and `bench` subcommands."""
    p = sub.add_parser(
        "train", help="run (or resume) the training run a RUN.toml describes, on this host"
    )
    add_hosts_option(p)
    p.add_argument("run_toml", metavar="RUN.toml", help="the run's configuration")
    p.set_defaults(func=run_train)
    p = sub.add_parser("bench", help="step-time probe: median s/step, tokens/s, memory, MFU")
    add_hosts_option(p)
    p.add_argument(
        "run_toml", metavar="RUN.toml", help="the run's configuration (its folder is not touched)"
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps, not timed (default 3)")
    p.add_argument(
        "--baseline",
        action="store_true",
        help="also time the references in the same process (reference-strong: HF Trainer + peft "
        "with Liger, unpadded rows, the batch searched in the Trainer; reference-plain: padded "
        "rows; reference: the old recipe; unsloth, when asked for: Unsloth in its own process) "
        "and print the ratio against reference-strong",
    )
    p.add_argument(
        "--references",
        default="strong,plain,old",
        metavar="LIST",
        help="with --baseline: which references (strong, plain, old, unsloth), comma-separated",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a RUN.toml key for this measurement (repeatable)",
    )
    p.set_defaults(func=run_bench)


def _missing_extra(e: ImportError) -> int:
    print(
        f"fleetdeck: the trainer needs the train extra ({e.name or e}); "
        "install it with: pip install 'fleetdeck[train]'",
        file=sys.stderr,
    )
    return 1


def run_train(args: argparse.Namespace) -> int:
    """Run the trainer in this process; its exit status (0 finished, 1 failed or refused, 2 bad RUN.toml)."""
    try:
        # deferred: train.main and torch (seconds at start-up; the train extra may be absent)
        from fleetdeck.backend.train.main import train_main
    except ImportError as e:
        return _missing_extra(e)
    return train_main([args.run_toml])


def run_bench(args: argparse.Namespace) -> int:
    """Run the step-time probe; 0 measured, 1 failed, 2 bad RUN.toml or arguments."""
    try:
        # deferred: train.bench and torch (seconds at start-up; the train extra may be absent)
        from fleetdeck.backend.train.bench import run_bench as bench
    except ImportError as e:
        return _missing_extra(e)
    return bench(args)
