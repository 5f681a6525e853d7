"""What holding a helper's answer to its declared record costs, against parsing that answer.

Builds a mirror `list` answer of `--files` hashed files (the largest answer an action helper
sends), then times, `--rounds` times each, in this process:

- baseline: `json.loads` of its text, which every answer costs already;
- the check: `record_refusal(answer, Listing)`, every declared field of every file checked.

Prints the medians and the ratio.

    python benchmarks/wire_check.py --files 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from fleetdeck.backend.fleet.link.wire import record_refusal
from fleetdeck.backend.host.mirror.wire import Listing


def listing(files: int) -> dict:
    """A folder's listing as the mirror helper answers it, every file hashed."""
    return {
        "path": "/runs/r",
        "real": "/runs/r",
        "kind": "dir",
        "dev": 2049,
        "ino": 2,
        "disk": {"boot": "b", "chain": [[2049, 2]], "self": True},
        "mode": 0o755,
        "free_bytes": 1 << 40,
        "parent_dev": 2049,
        "parent_link": None,
        "files": [
            {
                "path": f"shard-{i // 1000}/part-{i}.bin",
                "bytes": i,
                "mtime_ns": 1_700_000_000_000_000_000 + i,
                "ctime_ns": 1_700_000_000_000_000_000 + i,
                "ino": 1000 + i,
                "mode": 0o644,
                "sha256": f"{i:064x}",
            }
            for i in range(files)
        ],
        "dirs": [[f"shard-{d}", 0o755] for d in range(files // 1000 + 1)],
        "symlinks": [],
        "special": [],
        "errors": [],
        "partials": [],
        "outside": [],
    }


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    answer = listing(args.files)
    text = json.dumps(answer)
    assert record_refusal(answer, Listing) is None
    parse = median_seconds(lambda: json.loads(text), args.rounds)
    check = median_seconds(lambda: record_refusal(answer, Listing), args.rounds)
    print(f"answer: {args.files} files, {len(text) / 1e6:.1f} MB of JSON")
    print(f"baseline json.loads: {parse * 1000:.0f} ms (median of {args.rounds})")
    print(f"record_refusal:      {check * 1000:.0f} ms (median of {args.rounds})")
    print(f"check / parse: {check / parse:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
