"""What reading the trainers' logs costs a probe poll, against the same poll without it.

Lays out `--runs` run folders that no process works in (an operator's old runs: a checkpoint,
no final adapter, a `train.log` of `--log-mib` MiB of tqdm and log-dict lines), then times the
probe's runs section (`probe.runs.runs`) in this process, `--polls` times each:

- baseline: the log reader switched off (`run_log.find` answers None), as before it existed;
- with it: the first poll (each log's tail read, at most 256 KiB) and the polls after it (each
  log unchanged: one stat).

Prints the medians and the ratios.

    python benchmarks/run_logs.py --runs 200 --log-mib 1 --polls 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def lay_out(root: Path, runs: int, log_mib: float) -> None:
    line = "\r 45%|####5     | 72/159 [02:10<02:37,  1.81s/it]"
    block = (line * 20 + "\n{'loss': '2.312', 'grad_norm': '1.25', 'epoch': '0.5'}\n").encode()
    body = block * max(1, int(log_mib * (1 << 20)) // len(block))
    for i in range(runs):
        run = root / f"run-{i}"
        ck = run / "checkpoints" / "checkpoint-25"
        ck.mkdir(parents=True)
        (ck / "trainer_state.json").write_text('{"global_step": 25, "log_history": []}')
        (run / "train.log").write_bytes(body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--log-mib", type=float, default=1.0)
    ap.add_argument("--polls", type=int, default=10)
    args = ap.parse_args(argv)

    from fleetdeck.backend.host.probe import run_log, runs
    from fleetdeck.backend.host.probe.common import CACHE, Procs

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        lay_out(root, args.runs, args.log_mib)
        req = {"runs": [str(root)]}

        def poll() -> float:
            t0 = time.process_time()
            runs.runs(req, Procs(), [], time.time())
            return time.process_time() - t0

        found = run_log.find
        run_log.find = lambda *a, **k: None  # type: ignore[assignment]
        poll()  # the listing's own caches warm
        base = statistics.median(poll() for _ in range(args.polls))
        run_log.find = found  # type: ignore[assignment]
        run_log._SEEN.clear()
        CACHE.clear()
        poll()
        CACHE.clear()
        run_log._SEEN.clear()
        first = poll()
        warm = statistics.median(poll() for _ in range(args.polls))
    print(f"{args.runs} runs, {args.log_mib:g} MiB train.log each, no process working in them")
    print(f"baseline (logs not read): {base * 1e3:.1f} ms CPU per poll (median of {args.polls})")
    print(f"first poll reading each log's tail: {first * 1e3:.1f} ms CPU ({first / base:.2f}x)")
    print(f"later polls, logs unchanged: {warm * 1e3:.1f} ms CPU ({warm / base:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
