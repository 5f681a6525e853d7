#!/usr/bin/env bash
# Question: what does each of the trainer's levers give on the H200, against the default recipe in
# the same process? train_bench.py runs the default and then each lever alone (RUN.toml keys;
# the names are train_bench.LEVERS) on $MODELS (default qwen3-0.6b), 3 warm-up + 6 timed steps.
# Default list: projections apart, the LoRA product apart from the base matmul, the compiled
# cross-entropy chunk instead of the Triton kernel, torch's bundled FlashAttention-2 instead of
# FlashAttention-4. LEVERS overrides it (comma-separated names or KEY=VALUE[+KEY=VALUE]).
# On a lent H200: carry .whl1 in one call (the script stores it and exits 3), then .whl2 in the
# next, while the machine is warm (benchmarks/fa4_wheels.sh lays them out).
# Output: $OUT/levers.log, $OUT/levers.json.
source benchmarks/device_env.sh; rc=$?; [ $rc = 0 ] || exit $rc
log=$OUT/levers.log
LEVERS=${LEVERS:-projections-apart,lora-apart,ce-compiled,attention-fa2}
echo "== train_bench.py --models ${MODELS:-qwen3-0.6b} --levers $LEVERS --steps 6 --warmup 3" | tee -a $log
timeout ${LEVERS_TIMEOUT:-540} python3 benchmarks/train_bench.py --models ${MODELS:-qwen3-0.6b} --levers "$LEVERS" \
  --steps 6 --warmup 3 --json $OUT/levers.json >> $log 2>&1
echo "train_bench exit $?" | tee -a $log
grep -E "^qwen3|^#|rror" $log | grep -v Warning | tail -20
