#!/usr/bin/env bash
# Question: what tokens/s do this GPU's measured rates allow the trainer (the bound), and what
# fraction of it does the run reach, on the operator's recipe (seq_len 4096, r 32, 8 rows a step)
# and on Surogate's published configuration (seq_len 2048, r 16 / alpha 32, 2 x 4 rows a step,
# packing), beside Surogate's published rows for this card? Phases, in $PHASES (default
# "kernels default surogate"):
#   kernels   benchmarks/bound_kernels.py: the bound's rates for the three shapes at 2048 and 4096,
#             and every attention kernel in $KERNELS (default fa4,flash,cudnn) against the chosen one
#   default   fleetdeck bench <model>.toml --json --steps 6 --warmup 2 for $MODELS
#   surogate  train_bench.py --prepare --recipe surogate, then fleetdeck bench <model>-surogate.toml
#             --json --steps 10 --warmup 3 for $MODELS, then benchmarks/surogate_compare.py
# On a lent GPU: carry .whl1 in one call (stored; exit 3 unless ALLOW_NO_FA4=1, which runs the
# phases without FlashAttention-4), then .whl2 in the next (benchmarks/fa4_wheels.sh).
# Output: $OUT/bound.log and $OUT/bound-$TAG.tgz (every JSON; a call brings back at most 8 files).
source benchmarks/device_env.sh; rc=$?
if [ $rc != 0 ] && [ "${ALLOW_NO_FA4:-0}" != 1 ]; then exit $rc; fi
log=$OUT/bound.log
res=$(mktemp -d)
MODELS=${MODELS:-qwen3-0.6b qwen3-1.7b qwen3-4b}
for phase in ${PHASES:-kernels default surogate}; do
  case $phase in
    kernels)
      echo "== bound_kernels.py --models ${MODELS// /,} --seq-lens 2048,4096 --kernels ${KERNELS:-fa4,flash,cudnn}" | tee -a $log
      timeout ${KERNELS_TIMEOUT:-240} python3 benchmarks/bound_kernels.py --models "${MODELS// /,}" --seq-lens 2048,4096 \
        --kernels "${KERNELS:-fa4,flash,cudnn}" --json $res/kernels.json 2>> $log | tee -a $log ;;
    default|surogate)
      suffix=""; steps="--steps 6 --warmup 2"
      if [ $phase = surogate ]; then
        suffix="-surogate"; steps="--steps 10 --warmup 3"
        python3 benchmarks/train_bench.py --prepare $B --models "${MODELS// /,}" --recipe surogate > /dev/null
      fi
      for m in $MODELS; do
        echo "== fleetdeck bench $B/$m$suffix.toml --json $steps" | tee -a $log
        timeout ${BENCH_TIMEOUT:-200} bench $B/$m$suffix.toml --json $steps > $res/bench-$m$suffix.json 2>> $log
        echo "exit $?" | tee -a $log
        python3 -c "import json; r = json.load(open('$res/bench-$m$suffix.json')); b = r['bound'] or {}
for x in r['results']: print('$m$suffix', x['tokens_per_second'], 'tok/s', x['median_s_per_step'], 's/step spread', x['spread_pct'], '% mfu', x['mfu'], x['mfu_measured'], 'bound', x.get('bound_tokens_per_second'), 'fraction', x.get('fraction_of_bound'), 'peak', x['peak_memory_gib'], 'GiB')
print('$m$suffix rates', b.get('matmul_tflops'), b.get('attention_kernel'), b.get('attention_tflops'), 'full rows', b.get('full_rows_tokens_per_second'))" 2>&1 | tee -a $log
      done
      if [ $phase = surogate ]; then
        python3 benchmarks/surogate_compare.py $res/bench-*-surogate.json --json $res/surogate.json | tee -a $log
      fi ;;
  esac
done
grep -E "rror|out of memory" $log | grep -v Warning | tail -10
tar czf $OUT/bound-${TAG:-run}.tgz -C $res .
