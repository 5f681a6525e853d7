"""What judging a checkpoint's weights by their bytes costs, against hashing them.

Writes a real (not sparse: every block written) safetensors file of `--gib` GiB holding bf16
tensors the size of a model's layers, in a checkpoint folder with its adapter_config.json, then
in one run:

- judges it `--repeat` times with `layout.checkpoint_problem` (the one rule purge, --keep-newest,
  --after, run-finished and the run listing use), the verdict cache cleared before each, timing
  the process's own CPU (user + system) and the wall clock;
- hashes the file once with sha256 (what a purge's keeper re-verification costs), the baseline.

Prints both, and the ratio. The page cache is warm for both (the file was just written); the
judge reads the header (tens of KB) and seeks, so a cold cache costs it one more disk read,
while the hash reads every byte.

    python benchmarks/weights_judge.py --gib 1 --repeat 50
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path


def write_checkpoint(folder: Path, gib: float) -> int:
    """A checkpoint of one safetensors file of about `gib` GiB of bf16 tensors, 64 MiB each,
    every byte written. Returns its size."""
    tensor_bytes = 64 << 20
    n = max(1, int(gib * (1 << 30)) // tensor_bytes)
    header, at = {}, 0
    for i in range(n):
        header[f"base_model.model.layers.{i}.mlp.down_proj.weight"] = {
            "dtype": "BF16",
            "shape": [4096, tensor_bytes // 2 // 4096],
            "data_offsets": [at, at + tensor_bytes],
        }
        at += tensor_bytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    block = os.urandom(tensor_bytes)
    folder.mkdir(parents=True)
    path = folder / "adapter_model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for _ in range(n):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    (folder / "adapter_config.json").write_text("{}")
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="size of the weights file (GiB)")
    ap.add_argument("--repeat", type=int, default=50, help="judgements timed")
    ap.add_argument("--dir", default=None, help="where to write it (default: a temporary folder)")
    args = ap.parse_args(argv)

    from fleetdeck.backend.host.lib import layout, weights

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        ck = Path(tmp) / "run" / "checkpoints" / "checkpoint-100"
        size = write_checkpoint(ck, args.gib)
        cpu, wall = [], []
        for _ in range(args.repeat):
            weights._CACHE.clear()
            c0, w0 = time.process_time(), time.perf_counter()
            why = layout.checkpoint_problem(str(ck))
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            assert why is None, why
        c0, w0 = time.process_time(), time.perf_counter()
        h = hashlib.sha256()
        with open(ck / "adapter_model.safetensors", "rb") as f:
            for chunk in iter(lambda: f.read(8 << 20), b""):
                h.update(chunk)
        hash_cpu, hash_wall = time.process_time() - c0, time.perf_counter() - w0
    judge_cpu, judge_wall = statistics.median(cpu), statistics.median(wall)
    print(f"weights file: {size:,} bytes ({size / (1 << 30):.2f} GiB), every block written")
    print(
        f"judge (layout.checkpoint_problem, cache cleared), median of {args.repeat}: "
        f"{judge_cpu * 1e3:.3f} ms CPU, {judge_wall * 1e3:.3f} ms wall "
        f"(max {max(wall) * 1e3:.3f} ms wall)"
    )
    print(
        f"baseline sha256 of the file: {hash_cpu * 1e3:.0f} ms CPU, {hash_wall * 1e3:.0f} ms wall"
    )
    print(f"ratio (hash / judge, wall): {hash_wall / max(judge_wall, 1e-9):,.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
