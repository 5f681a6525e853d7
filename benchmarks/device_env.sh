#!/usr/bin/env bash
# Sourced by the trainer's benchmark scripts on a lent H200 (`source benchmarks/device_env.sh`):
# puts this checkout on PYTHONPATH as the `fleetdeck` package (backend/, cli/, tui/), installs
# FlashAttention-4 and liger-kernel from the carried wheels (benchmarks/fa4_setup.sh: .whl1/ in
# one call, .whl2/ in the next while the machine is warm), writes the bench corpus and one
# RUN.toml per model into $B (/tmp/bench, train_bench.py --prepare) and puts `bench` and `train`
# on PATH (the trainer's own entry points, so no console script is needed). Where Unsloth's wheels
# travel too (benchmarks/unsloth_wheels.sh), installs them apart (benchmarks/unsloth_setup.sh;
# its status in UNSLOTH_RC, 0 ready) and points the Unsloth process at them. Returns
# fa4_setup.sh's status: 0 ready, 3 waiting for the wheels' second half.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/fd/fleetdeck
for d in backend cli show tui; do [ -d "$d" ] && ln -sfn "$PWD/$d" /tmp/fd/fleetdeck/$d; done
export PYTHONPATH=/tmp/fd:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export B=/tmp/bench
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -c "import sys; from fleetdeck.backend.train.bench import bench_main; sys.exit(bench_main())" "$@"\n' > /tmp/bin/bench
printf '#!/bin/sh\nexec python3 -c "import sys; from fleetdeck.backend.train.main import train_main; sys.exit(train_main())" "$@"\n' > /tmp/bin/train
chmod +x /tmp/bin/bench /tmp/bin/train; export PATH=/tmp/bin:$PATH
[ -f $B/qwen3-4b.toml ] || python3 benchmarks/train_bench.py --prepare $B --models qwen3-0.6b,qwen3-1.7b,qwen3-4b >/dev/null
bash benchmarks/unsloth_setup.sh; export UNSLOTH_RC=$?
export FLEETDECK_UNSLOTH_PYTHONPATH=/tmp/fd:/tmp/usite FLEETDECK_UNSLOTH_DIR=/tmp
bash benchmarks/fa4_setup.sh
