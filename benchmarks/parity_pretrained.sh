#!/usr/bin/env bash
# Question: does base_fp8 train like the plain path on weights that are not random?
# On a lent H200, two calls while the machine stays warm (one call is 600 s at most):
#   1st: benchmarks/pretrain_base.py pre-trains every parameter of the Qwen3-0.6B shape on
#        random-word text (its own seed) for PRETRAIN_S seconds and saves it as a local
#        checkpoint (/tmp/pre); benchmarks/outliers.py measures its activation outliers beside
#        the random shape's; then the plain path fine-tunes it (STEPS steps of 8 rows of 4096 on
#        the bench corpus, an eval every 10) and the call exits 3.
#   2nd: the bf16 fast path, then the fast path with base_fp8 = true, each compared with the
#        plain run of the first call (check_parity.py --plain-from).
# The runs go one after another: a fast run beside the plain one ran out of GPU memory (each
# sizes its rows from the memory free at its start). No FlashAttention-4 wheels travel, so the
# fast path's attention is torch's flash varlen (the recipe line in each log says so).
# Output in $OUT: pretrain.log, pretrain.json, outliers.json, plain.log (1st call);
# parity-pre-fast.{log,json}, parity-pre-fp8.{log,json} and the runs' train.logs (2nd).
source benchmarks/device_env.sh >/dev/null 2>&1
set -u
STEPS=${STEPS:-50}; PRETRAIN_S=${PRETRAIN_S:-150}
args="--model /tmp/pre --corpus $B/corpus.jsonl --steps $STEPS --eval-steps 10"
if [ ! -f /tmp/pp/plain.json ]; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  [ -f /tmp/pre/model.safetensors ] || timeout $((PRETRAIN_S + 150)) python3 benchmarks/pretrain_base.py \
    --out /tmp/pre --seconds "$PRETRAIN_S" > $OUT/pretrain.log 2>&1
  echo "pretrain exit $?"; grep -vE "Warning|warn|Writing" $OUT/pretrain.log | tail -4
  cp /tmp/pre/pretrain.json $OUT/ 2>/dev/null; [ -f /tmp/pre/model.safetensors ] || exit 1
  python3 benchmarks/outliers.py --models /tmp/pre,random:qwen3-0.6b --corpus $B/corpus.jsonl \
    --json $OUT/outliers.json > /dev/null 2>&1; echo "outliers exit $?"
  timeout $((590 - SECONDS)) python3 benchmarks/check_parity.py --paths plain $args --out /tmp/pp \
    > $OUT/plain.log 2>&1
  echo "plain exit $?"; grep -E "^== |median" $OUT/plain.log
  exit 3
fi
python3 -c "import json; json.dump({'runs': {'plain': json.load(open('/tmp/pp/plain.json'))}}, open('/tmp/plain-only.json', 'w'))" || exit 1
python3 benchmarks/check_parity.py --keep --plain-from /tmp/plain-only.json $args --out /tmp/pf \
  --json $OUT/parity-pre-fast.json > $OUT/parity-pre-fast.log 2>&1
python3 benchmarks/check_parity.py --keep --plain-from /tmp/plain-only.json --fast-set base_fp8=true $args \
  --out /tmp/p8 --json $OUT/parity-pre-fp8.json > $OUT/parity-pre-fp8.log 2>&1
for k in fast fp8; do echo "== parity $k"; grep -E "^eval|largest" $OUT/parity-pre-$k.log; done
cp /tmp/pf/fast.log $OUT/fast-train.log 2>/dev/null; cp /tmp/p8/fast.log $OUT/fp8-train.log 2>/dev/null
cp /tmp/pp/plain.log $OUT/plain-train.log 2>/dev/null
