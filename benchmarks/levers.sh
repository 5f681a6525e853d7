#!/usr/bin/env bash
# Question: which speed levers pay on the H200, each against the default recipe in the same process?
# Runs FA4's backward tiles alone (benchmarks/fa4_bwd_tiles.py), then train_bench.py with the
# default recipe and each lever (RUN.toml keys, named in train_bench.LEVERS) on $MODELS
# (default qwen3-0.6b): CUDA graphs, torch.compile's max-autotune (Triton matmul templates with
# fused epilogues), and the fastest FA4 backward tile when it beats FA4's own by 1% or more.
# On a lent H200: carry .whl1 in one call (`bash benchmarks/levers.sh` stores it and exits 3),
# then .whl2 in the next. Output: $OUT/levers.log, $OUT/levers.json, $OUT/fa4-bwd-tiles.json.
# LEVERS overrides the list (comma-separated names or KEY=VALUE).
source benchmarks/device_env.sh; rc=$?; [ $rc = 0 ] || exit $rc
log=$OUT/levers.log
python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' | tee -a $log
if [ -z "${LEVERS:-}" ]; then
  timeout 150 python3 benchmarks/fa4_bwd_tiles.py --json $OUT/fa4-bwd-tiles.json 2>&1 | grep -v Warning | tee -a $log
  best=$(python3 -c "import json; d=json.load(open('$OUT/fa4-bwd-tiles.json')); print(d['best'] if d['best'] != 'auto' and d['speedup_vs_auto'] >= 1.01 else '')" 2>/dev/null)
  LEVERS="cuda-graphs${best:+,fa4-bwd-$best},compile-max-autotune"
fi
echo "== train_bench.py --models ${MODELS:-qwen3-0.6b} --levers $LEVERS --steps 6 --warmup 3" | tee -a $log
timeout ${LEVERS_TIMEOUT:-420} python3 benchmarks/train_bench.py --models ${MODELS:-qwen3-0.6b} --levers "$LEVERS" \
  --steps 6 --warmup 3 --json $OUT/levers.json >> $log 2>&1
echo "train_bench exit $?" | tee -a $log
grep -E "^qwen3|^#|rror" $log | grep -v Warning | tail -20
