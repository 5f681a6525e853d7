#!/usr/bin/env bash
# Question: how fast does the trainer run the 0.6B, 1.7B and 4B shapes on one H200? Runs the
# operator's probe, `fleetdeck bench RUN.toml --json --steps 6 --warmup 2` (through
# fleetdeck.backend.train.bench), for each model in $MODELS (default: qwen3-0.6b qwen3-1.7b
# qwen3-4b) on the bench corpus and RUN.tomls of train_bench.py --prepare (random weights, 8 rows of
# 4096 tokens a step, LoRA r 32 on every projection). REFS=strong (or strong,plain,old,unsloth) adds
# --baseline --references $REFS: the references in the same process, with the ratio against
# reference-strong (see benchmarks/bench_references.sh); with unsloth in REFS, Unsloth runs in its
# own process (benchmarks/unsloth_wheels.sh carries its wheels) and the JSON holds ratio_vs_unsloth.
# On a lent H200: carry .whl1 in one call (stored; exit 3), then .whl2 in the next.
# Output: $OUT/bench.log and $OUT/bench-<model>.json.
source benchmarks/device_env.sh; rc=$?; [ $rc = 0 ] || exit $rc
log=$OUT/bench.log
for m in ${MODELS:-qwen3-0.6b qwen3-1.7b qwen3-4b}; do
  extra=${REFS:+--baseline --references $REFS}
  echo "== fleetdeck bench $B/$m.toml $extra --json --steps 6 --warmup 2" >> $log
  timeout ${BENCH_TIMEOUT:-330} bench $B/$m.toml $extra --json --steps 6 --warmup 2 > $OUT/bench-$m.json 2>> $log
  echo "exit $?" >> $log
  python3 -c "import json; r = json.load(open('$OUT/bench-$m.json'))
for x in r['results']: print('$m', x['recipe'], x['tokens_per_second'], 'tok/s', x['median_s_per_step'], 's/step spread', x['spread_pct'], '% mfu', x['mfu'], x['mfu_measured'], 'peak', x['peak_memory_gib'], 'GiB', x['s_per_step'])
print('$m ratio', r.get('ratio'), r.get('ratio_vs_plain'), r.get('ratio_vs_reference'), 'vs unsloth', r.get('ratio_vs_unsloth'), 'failed', r.get('failed'))" 2>&1 | tail -6
done
grep -E "rror|out of memory" $log | grep -v Warning | tail -10
