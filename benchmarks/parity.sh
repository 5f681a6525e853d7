#!/usr/bin/env bash
# Question: does the fast path train like the plain one? benchmarks/check_parity.py trains the
# Qwen3-0.6B shape (random weights, seed 4919, the bench corpus, 8 rows of 4096 a step, lr 1e-4)
# for 12 steps with an eval every 4, once on the fast path (FlashAttention-4 varlen, compiled
# layers, fused groups with the LoRA product joined, the Triton cross-entropy kernel) and once on
# the plain path (per-document SDPA, eager, projections apart, the eager cross-entropy chunk), and
# prints both loss curves, the eval losses and the largest relative gap.
# On a lent H200, two calls while the machine stays warm: the first (carry .whl1) runs the plain
# path, which needs no FlashAttention-4, keeps it in /tmp/parity and exits 3; the second (carry
# .whl2) installs FlashAttention-4, runs the fast path and compares.
# Output: $OUT/parity-plain.log (first call), $OUT/parity.log, $OUT/parity-0.6b.json, $OUT/fast-train.log.
source benchmarks/device_env.sh; rc=$?
args="--model random:qwen3-0.6b --corpus $B/corpus.jsonl --steps 12 --eval-steps 4 --out /tmp/parity"
if [ $rc = 3 ]; then
  timeout 420 python3 benchmarks/check_parity.py --paths plain $args > $OUT/parity-plain.log 2>&1
  echo "parity plain exit $?"; grep -vE "Warning|warn" $OUT/parity-plain.log | tail -20
  exit 3
fi
[ $rc = 0 ] || exit $rc
timeout ${PARITY_TIMEOUT:-300} python3 benchmarks/check_parity.py --keep --log-recompiles $args \
  --json $OUT/parity-0.6b.json > $OUT/parity.log 2>&1
echo "parity exit $?"; cp /tmp/parity/fast.log $OUT/fast-train.log 2>/dev/null
grep -vE "Warning|warn" $OUT/parity.log | tail -24
