#!/usr/bin/env bash
# What ran on the lent H200 (one call per phase). Usage: bash benchmarks/gpu_session.sh PHASE
# Needs the wheels in .whl/ (liger-kernel; textual/asyncssh for the `fleetdeck` console entry);
# phases k to o need FlashAttention-4 put in place first by benchmarks/fa4_setup.sh. The sixth
# round's phases (r6a, r6b, r6c) take every wheel from .whl1/ and .whl2/ (benchmarks/fa4_wheels.sh)
# and run fa4_setup.sh themselves: r6a carries .whl1, r6b (right after, machine warm) .whl2.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
mkdir -p /tmp/fd/fleetdeck && ln -sfn "$PWD/backend" /tmp/fd/fleetdeck/backend && ln -sfn "$PWD/tui" /tmp/fd/fleetdeck/tui
export PYTHONPATH=/tmp/fd:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -c "import sys; from fleetdeck.cli.main import main; sys.exit(main())" "$@"\n' > /tmp/bin/fleetdeck
chmod +x /tmp/bin/fleetdeck; export PATH=/tmp/bin:$PATH
B=/tmp/bench; python3 benchmarks/train_bench.py --prepare $B --models qwen3-0.6b,qwen3-1.7b,qwen3-4b >/dev/null
phase=${1:-a}
printf '#!/bin/sh\nexec python3 -c "import sys; from fleetdeck.backend.train.bench import bench_main; sys.exit(bench_main())" "$@"\n' > /tmp/bin/bench
printf '#!/bin/sh\nexec python3 -c "import sys; from fleetdeck.backend.train.main import train_main; sys.exit(train_main())" "$@"\n' > /tmp/bin/train
chmod +x /tmp/bin/bench /tmp/bin/train
# every bench JSON under $OUT: each recipe's figures, then the ratios
summarize_benches() {
  for f in $OUT/bench-*.json; do python3 -c "import json;r=json.load(open('$f'));[print('$f'.split('/')[-1],x['recipe'],x['tokens_per_second'],x['median_s_per_step'],x['spread_pct'],x['mfu'],x.get('mfu_measured'),x['peak_memory_gib'],x['description']) for x in r['results']];print('ratio',r.get('ratio'),r.get('ratio_vs_plain'),r.get('ratio_vs_reference'))" 2>&1 | tail -6; done
}
# `fleetdeck bench` on each MODEL:TIMEOUT[:baseline] with STEPS timed steps, logged to $OUT/LOG.log,
# one bench-MODEL.json each; then the log's errors and every JSON's figures
bench_models() {
  local log=$OUT/$1.log steps=$2 spec m t base; shift 2
  for spec in "$@"; do
    IFS=: read -r m t base refs <<< "$spec"
    base=${base:+--baseline }
    refs=${refs:+--references $refs }
    echo "== fleetdeck bench $B/$m.toml ${base}${refs}--json --steps $steps --warmup 2" >> $log
    timeout $t bench $B/$m.toml $base$refs--json --steps $steps --warmup 2 > $OUT/bench-$m.json 2>> $log
  done
  grep -E "reference-strong:|reference-plain:|out of memory|rror" $log | grep -v Warning | tail -30
  summarize_benches
}
# the 0.6B shape trained end to end (6 steps, eval and save every 3) as runs/e2e-rROUND, logged to
# $OUT/LOG: TOML e2eROUND.toml, then the log's key lines, run.json's state and the run folder
train_e2e() {
  local round=$1 log=$OUT/$2
  sed -e "s/^output = .*/output = \"runs\/e2e-r$round\"/" $B/qwen3-0.6b.toml > $B/e2e$round.toml
  printf 'max_steps = 6\neval_steps = 3\nsave_steps = 3\n' >> $B/e2e$round.toml
  timeout 200 train $B/e2e$round.toml > $log 2>&1; echo "train exit $?" | tee -a $log
  grep -E "recipe|LoRA|cross-entropy|step |saved|finished|failed|Error" $log | grep -v Warning | tail -16
  python3 -c "import json;m=json.load(open('$B/runs/e2e-r$round/run.json'));print('state',m['state'])" | tee -a $log
  ls $B/runs/e2e-r$round $B/runs/e2e-r$round/checkpoints $B/runs/e2e-r$round/adapter | tee -a $log
}
if [ "$phase" = r6a ]; then  # nvidia-h200, sixth round, call 1 (carry .whl1): half the wheels; the plain parity run
  bash benchmarks/fa4_setup.sh; echo "fa4_setup exit $? (3: waiting for .whl2)"
  python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
  [ -n "${NOPLAIN:-}" ] && exit 0
  timeout 420 python3 benchmarks/check_parity.py --paths plain --model random:qwen3-0.6b --corpus $B/corpus.jsonl \
    --steps 12 --eval-steps 4 --out /tmp/parity > $OUT/r6a-parity-plain.log 2>&1; echo "parity plain exit $?"
  cp /tmp/parity/plain.log $OUT/r6a-plain-train.log; grep -vE "Warning|warn" $OUT/r6a-parity-plain.log | tail -20
fi
if [ "$phase" = r6b ] || [ "$phase" = r6d ]; then  # nvidia-h200, call 2 (carry .whl2): FA4 in one pip call; parity; the 0.6B bench
  # (r6b as first run: parity with the plain run of r6a kept in /tmp/parity; r6d, the final build: the
  # plain run taken from r6b's parity JSON, since the plain path's code did not change; fleetdeck
  # now measured before the references, and short micro-batches filled up to a full one)
  bash benchmarks/fa4_setup.sh || { echo "fa4_setup failed: no FlashAttention-4"; exit 1; }
  reuse="--keep"; [ "$phase" = r6d ] && reuse="--plain-from benchmarks/results/h200-r6b-parity-0.6b.json"
  timeout 200 python3 benchmarks/check_parity.py $reuse --log-recompiles --model random:qwen3-0.6b \
    --corpus $B/corpus.jsonl --steps 12 --eval-steps 4 --out /tmp/parity --json $OUT/parity-0.6b.json > $OUT/$phase-parity.log 2>&1
  echo "parity exit $?"; cp /tmp/parity/fast.log $OUT/$phase-fast-train.log; grep -vE "Warning|warn" $OUT/$phase-parity.log | tail -45
  bench_models $phase 6 qwen3-0.6b:330:baseline
fi
if [ "$phase" = r6e ]; then  # nvidia-h200, after r6a (carry .whl2): the 0.6B bench alone, recompiles logged; 1.7B and 4B vs reference-strong
  bash benchmarks/fa4_setup.sh || { echo "fa4_setup failed: no FlashAttention-4"; exit 1; }
  (export TORCH_LOGS=recompiles; bench_models r6e-0.6b 6 qwen3-0.6b:90)
  grep -c "Recompiling function" $OUT/r6e-0.6b.log | sed 's/^/recompiles logged: /'
  bench_models r6e 6 qwen3-1.7b:230:baseline:strong qwen3-4b:270:baseline:strong
fi
if [ "$phase" = r6f ]; then  # nvidia-h200, after r6a: the 0.6B bench alone again, each step's ranges and FA4 kernel builds
  bash benchmarks/fa4_setup.sh || { echo "fa4_setup failed: no FlashAttention-4"; exit 1; }
  bench_models r6f 6 qwen3-0.6b:100
  python3 -c "import json;r=json.load(open('$OUT/bench-qwen3-0.6b.json'));[print(x) for x in r['results'][0]['per_step']]"
fi
if [ "$phase" = r6g ]; then  # nvidia-h200, warm after r6f: r6f twice, torch.compile's disk caches warm, then off
  # (as run: the two r6f commands one after the other in one call; the bench now turns the caches
  # off itself, so a rerun of this phase measures the second configuration twice)
  bash benchmarks/gpu_session.sh r6f; mv $OUT/r6f.log $OUT/r6g-warm-caches.log
  TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0 bash benchmarks/gpu_session.sh r6f
fi
if [ "$phase" = r6c ]; then  # planned, not run (device time): 1.7B against all three references, 4B against the strong one
  bash benchmarks/fa4_setup.sh || { echo "fa4_setup failed: no FlashAttention-4"; exit 1; }
  bench_models r6c 6 qwen3-1.7b:300:baseline:strong,plain,old qwen3-4b:250:baseline:strong
fi
if [ "$phase" = k ]; then  # nvidia-h200, third round: FlashAttention-4 + fused projections as the default
  # (levers as they stood in phases k and n: 11 = torch's FA2 instead of FA4, 12 = projections apart)
  python3 -c 'import torch, transformers, peft, flash_attn.cute; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'
  echo "== train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 11,12 --steps 5 --warmup 3" >> $OUT/k.log
  timeout 300 python3 benchmarks/train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 11,12 --steps 5 --warmup 3 >> $OUT/k.log 2>&1
  echo "== fleetdeck bench $B/qwen3-0.6b.toml --baseline --json --steps 6 --warmup 2" >> $OUT/k.log
  timeout 200 bench $B/qwen3-0.6b.toml --baseline --json --steps 6 --warmup 2 > $OUT/bench-qwen3-0.6b.json 2>> $OUT/k.log
  grep -E "^qwen3|reference-strong:|out of memory|rror" $OUT/k.log | grep -v Warning | tail -20
  summarize_benches
fi
if [ "$phase" = m ]; then  # nvidia-h200: phase k's build plus the next step's batches built ahead
  bench_models m 6 qwen3-0.6b:220:baseline qwen3-1.7b:100 qwen3-4b:150
fi
if [ "$phase" = n ]; then  # nvidia-h200: low-rank terms accumulated inside the matmuls (o and down too)
  echo "== train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 12 --steps 5 --warmup 3" >> $OUT/n.log
  timeout 200 python3 benchmarks/train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 12 --steps 5 --warmup 3 >> $OUT/n.log 2>&1
  echo "== fleetdeck bench $B/qwen3-0.6b.toml --baseline --json --steps 6 --warmup 2" >> $OUT/n.log
  timeout 220 bench $B/qwen3-0.6b.toml --baseline --json --steps 6 --warmup 2 > $OUT/bench-qwen3-0.6b.json 2>> $OUT/n.log
  grep -E "^qwen3|reference-strong:|out of memory|rror" $OUT/n.log | grep -v Warning | tail -20
  summarize_benches
fi
if [ "$phase" = o ]; then  # nvidia-h200: the final default (FlashAttention-4, projections apart, batches ahead)
  bench_models o 6 qwen3-0.6b:215:baseline qwen3-1.7b:80
fi
if [ "$phase" = p ]; then  # nvidia-h200, fourth round: the Triton cross-entropy kernel; where the GPU waits
  timeout 120 python3 benchmarks/check_ce.py > $OUT/p-check-ce.log 2>&1; cat $OUT/p-check-ce.log
  echo "== train_bench.py --models qwen3-0.6b --profile --warmup 3" >> $OUT/p.log
  timeout 150 python3 benchmarks/train_bench.py --models qwen3-0.6b --profile --warmup 3 >> $OUT/p.log 2>&1
  echo "== train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 13 --steps 5 --warmup 3" >> $OUT/p.log
  timeout 260 python3 benchmarks/train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 13 --steps 5 --warmup 3 >> $OUT/p.log 2>&1
  grep -E "^#|^  |^qwen3|out of memory|rror" $OUT/p.log | grep -v Warning | tail -60
fi
if [ "$phase" = q ] || [ "$phase" = r ]; then  # nvidia-h200: fused projections, coordinate-descent tuning
  # (as run, lever 12 was "projections fused" (the default then kept them apart; lever 12 is now
  # "projections apart"), lever 14 was "each step waited for before the next is queued", against a build that
  # queued the next step before reading a loss; that build gained nothing and was not kept, and
  # coordinate-descent tuning, lever 15 then, is lever 14 now)
  m=qwen3-0.6b; [ "$phase" = r ] && m=qwen3-1.7b
  echo "== train_bench.py --models $m --levers 12,14 --steps 5 --warmup 3" >> $OUT/$phase.log
  timeout 540 python3 benchmarks/train_bench.py --models $m --levers 12,14 --steps 5 --warmup 3 >> $OUT/$phase.log 2>&1
  grep -E "^#|^qwen3|out of memory|rror" $OUT/$phase.log | grep -v Warning | tail -20
fi
if [ "$phase" = s ]; then  # nvidia-h200: the fourth round's default (Triton cross-entropy, projections fused)
  bench_models s 6 qwen3-0.6b:230:baseline qwen3-1.7b:100 qwen3-4b:150
fi
if [ "$phase" = t ]; then  # nvidia-h200: FA4's backward on K/V repeated to the query heads; levers compiled afresh
  # (as run: the build repeated K/V for the backward by default and lever 15 was FA4's own grouped
  # backward; check_varlen.py timed both. It did not pay and was reverted; lever 15 is gone)
  timeout 100 python3 benchmarks/check_varlen.py > $OUT/t-check-varlen.log 2>&1; grep -v Warn $OUT/t-check-varlen.log | grep -E "fa4|timing|passed|FAIL"
  for m in qwen3-0.6b:200 qwen3-1.7b:250; do
    echo "== train_bench.py --models ${m%%:*} --levers 14,15 --steps 5 --warmup 3" >> $OUT/t.log
    timeout ${m##*:} python3 benchmarks/train_bench.py --models ${m%%:*} --levers 14,15 --steps 5 --warmup 3 >> $OUT/t.log 2>&1
  done
  grep -E "^#|^qwen3|out of memory|rror" $OUT/t.log | grep -v Warning | tail -20
fi
if [ "$phase" = u ]; then  # nvidia-h200: the final default again, 10 timed steps
  bench_models u 10 qwen3-0.6b:130 qwen3-1.7b:170
fi
if [ "$phase" = v ]; then  # nvidia-h200: the fourth round's default trains end to end (eval, checkpoints, adapter)
  train_e2e 4 v.log
fi
if [ "$phase" = w ]; then  # nvidia-h200, fifth round: CE edge cases on the GPU; LoRA joined to the base matmul
  timeout 120 python3 benchmarks/check_ce.py > $OUT/w-check-ce.log 2>&1; grep -v Warn $OUT/w-check-ce.log | grep -vE "^ |^$" | tail -20
  timeout 150 python3 benchmarks/check_lora_in_base.py > $OUT/w-check-lora.log 2>&1; grep -v Warn $OUT/w-check-lora.log | grep -E "ms|OK|FAIL|rror"
  echo "== train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 15 --steps 5 --warmup 3" >> $OUT/w.log
  timeout 300 python3 benchmarks/train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 15 --steps 5 --warmup 3 >> $OUT/w.log 2>&1
  grep -E "^#|^qwen3|out of memory|rror" $OUT/w.log | grep -v Warning | tail -20
fi
if [ "$phase" = x ]; then  # nvidia-h200: the fifth round's default (LoRA joined to the fused groups' matmuls)
  bench_models x 6 qwen3-0.6b:230:baseline qwen3-1.7b:100 qwen3-4b:150
fi
if [ "$phase" = y ]; then  # nvidia-h200: phase x's 0.6B bench again (10 steps, recompiles logged); end to end
  (export TORCH_LOGS=recompiles; bench_models y 10 qwen3-0.6b:260:baseline)
  grep -ciE "recompil" $OUT/y.log | sed 's/^/recompile lines: /'
  train_e2e 5 y-train-e2e.log
fi
if [ "$phase" = z ]; then  # nvidia-h200: phase x's build with packed ranges dynamic from the first batch
  bench_models z 6 qwen3-0.6b:230:baseline qwen3-1.7b:330:baseline qwen3-4b:150
fi
if [ "$phase" = z4 ]; then  # nvidia-h200: the 4B shape against both references in one process
  bench_models z4 6 qwen3-4b:560:baseline
fi
if [ "$phase" = zp ]; then  # nvidia-h200: where the 0.6B step's time goes with phase z's build
  echo "== train_bench.py --models qwen3-0.6b --profile --warmup 3" >> $OUT/zp.log
  timeout 200 python3 benchmarks/train_bench.py --models qwen3-0.6b --profile --warmup 3 >> $OUT/zp.log 2>&1
  grep -E "^#|^  " $OUT/zp.log | grep -v Warning | head -50
fi
if [ "$phase" = zl ]; then  # nvidia-h200: the joined LoRA backward's add as a separate (fusable) add vs inside a matmul
  echo "== train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 16 --steps 5 --warmup 3" >> $OUT/zl.log
  timeout 330 python3 benchmarks/train_bench.py --models qwen3-0.6b,qwen3-1.7b --levers 16 --steps 5 --warmup 3 >> $OUT/zl.log 2>&1
  grep -E "^#|^qwen3|out of memory|rror" $OUT/zl.log | grep -v Warning | tail -20
fi
if [ "$phase" = zf ]; then  # nvidia-h200: the final build (phase zl's default) through `fleetdeck bench`
  bench_models zf 6 qwen3-4b:130 qwen3-1.7b:90
fi
if [ "$phase" = l ]; then  # nvidia-h200: phase k's bench for the 1.7B and 4B shapes
  for m in qwen3-1.7b:230 qwen3-4b:330; do
    echo "== fleetdeck bench $B/${m%%:*}.toml --baseline --json --steps 6 --warmup 2" >> $OUT/l.log
    timeout ${m##*:} bench $B/${m%%:*}.toml --baseline --json --steps 6 --warmup 2 > $OUT/bench-${m%%:*}.json 2>> $OUT/l.log
  done
  grep -E "reference-strong:|out of memory|rror" $OUT/l.log | grep -v Warning | tail -20
  summarize_benches
fi
if [ "$phase" = j ]; then  # nvidia-h200: phase i's hybrid again (torch.compile now off for recurrent models)
  sed -e 's/^output = .*/output = "runs\/hybrid"/' -e 's/random:qwen3-0.6b/random:tiny-hybrid/' -e 's/^seq_len = .*/seq_len = 512/' \
    $B/qwen3-0.6b.toml > $B/hybrid.toml
  printf 'max_steps = 6\neval_steps = 3\nsave_steps = 3\n' >> $B/hybrid.toml
  timeout 150 train $B/hybrid.toml > $OUT/j.log 2>&1; echo "exit $?" >> $OUT/j.log
  python3 -c "import json;m=json.load(open('$B/runs/hybrid/run.json'));print(m['state'], m.get('packing'), m.get('recipe'), m['lora'].get('per_layer_type'))" >> $OUT/j.log 2>&1
  grep -vE "Warning|warn" $OUT/j.log | tail -20
fi
if [ "$phase" = i ]; then  # nvidia-h200: end to end on the GPU: the tiny hybrid (unpacked) and the 0.6B shape
  sed -e 's/^output = .*/output = "runs\/hybrid"/' -e 's/random:qwen3-0.6b/random:tiny-hybrid/' -e 's/^seq_len = .*/seq_len = 512/' \
    $B/qwen3-0.6b.toml > $B/hybrid.toml
  printf 'max_steps = 6\neval_steps = 3\nsave_steps = 3\n' >> $B/hybrid.toml
  sed -e 's/^output = .*/output = "runs\/e2e-0.6b"/' $B/qwen3-0.6b.toml > $B/e2e.toml
  printf 'max_steps = 6\neval_steps = 3\nsave_steps = 3\n' >> $B/e2e.toml
  for t in hybrid e2e; do
    echo "== fleetdeck train $B/$t.toml" >> $OUT/i.log
    timeout 150 train $B/$t.toml >> $OUT/i.log 2>&1; echo "exit $?" >> $OUT/i.log
    python3 -c "import json;m=json.load(open('$B/runs/$t/run.json'.replace('runs/e2e','runs/e2e-0.6b')));print('$t', m['state'], m.get('packing'), m.get('recipe'), json.dumps(m.get('corpus')), m['lora'].get('per_layer_type'))" >> $OUT/i.log 2>&1
  done
  grep -vE "Warning|warn" $OUT/i.log | grep -E "==|packing|recipe|corpus|step [0-9]|exit|rror|hybrid|e2e" | tail -40
fi
if [ "$phase" = h ]; then  # nvidia-h200 (one GPU): phase g one model after the other, fewer steps
  for m in qwen3-0.6b:150 qwen3-1.7b:175 qwen3-4b:240; do
    echo "== fleetdeck bench $B/${m%%:*}.toml --baseline --json --steps 6 --warmup 2" >> $OUT/h.log
    timeout ${m##*:} bench $B/${m%%:*}.toml --baseline --json --steps 6 --warmup 2 > $OUT/bench-${m%%:*}.json 2>> $OUT/h.log
  done
  grep -E "reference-strong|out of memory|rror" $OUT/h.log | grep -v Warning | tail -20
  summarize_benches
fi
if [ "$phase" = g ]; then  # nvidia-h200-x2: phase f's benches again, reference-strong retrying down on OOM
  (export CUDA_VISIBLE_DEVICES=0
   for m in qwen3-0.6b qwen3-4b; do
     echo "== fleetdeck bench $B/$m.toml --baseline --json --steps 8" >> $OUT/g0.log
     timeout 280 bench $B/$m.toml --baseline --json --steps 8 > $OUT/bench-$m.json 2>> $OUT/g0.log
   done) &
  (export CUDA_VISIBLE_DEVICES=1
   echo "== fleetdeck bench $B/qwen3-1.7b.toml --baseline --json --steps 8" >> $OUT/g1.log
   timeout 280 bench $B/qwen3-1.7b.toml --baseline --json --steps 8 > $OUT/bench-qwen3-1.7b.json 2>> $OUT/g1.log) &
  wait
  grep -E "reference-strong|out of memory|rror" $OUT/g*.log | grep -v Warning | tail -20
  summarize_benches
fi
if [ "$phase" = f ]; then  # nvidia-h200-x2: both references + fleetdeck per model, then gpus = 2
  (export CUDA_VISIBLE_DEVICES=0
   for m in qwen3-0.6b qwen3-1.7b; do
     echo "== fleetdeck bench $B/$m.toml --baseline --json --steps 8" >> $OUT/f0.log
     timeout 200 bench $B/$m.toml --baseline --json --steps 8 > $OUT/bench-$m.json 2>> $OUT/f0.log
   done) &
  (export CUDA_VISIBLE_DEVICES=1
   echo "== fleetdeck bench $B/qwen3-4b.toml --baseline --json --steps 8" >> $OUT/f1.log
   timeout 330 bench $B/qwen3-4b.toml --baseline --json --steps 8 > $OUT/bench-qwen3-4b.json 2>> $OUT/f1.log) &
  wait
  for m in qwen3-1.7b qwen3-4b; do
    sed -e "s/^output = .*/output = \"runs\/2gpu-$m\"/" $B/$m.toml > $B/2gpu-$m.toml
    printf 'max_steps = 7\neval_steps = 7\nsave_steps = 7\ngpus = 2\n' >> $B/2gpu-$m.toml
    echo "== fleetdeck train $B/2gpu-$m.toml (gpus = 2)" >> $OUT/f2.log
    timeout 115 train $B/2gpu-$m.toml >> $OUT/f2.log 2>&1; echo "exit $?" >> $OUT/f2.log
    cat $B/runs/2gpu-$m/progress.jsonl >> $OUT/f2.log
  done
  grep -E "reference-strong:|recipe for|step [0-9]|exit|rror" $OUT/f*.log | grep -v Warning | tail -40
  summarize_benches
fi
if [ "$phase" = e ]; then  # nvidia-h200-x2, second round: kernels, both references, profile, levers
  python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__, "cudnn", torch.backends.cudnn.version())'
  (export CUDA_VISIBLE_DEVICES=0
   timeout 90 python3 benchmarks/check_varlen.py > $OUT/g0.log 2>&1
   for m in qwen3-0.6b qwen3-1.7b; do
     echo "== fleetdeck bench $B/$m.toml --baseline --json" >> $OUT/g0.log
     timeout 240 bench $B/$m.toml --baseline --json > $OUT/bench-$m.json 2>> $OUT/g0.log
   done) &
  (export CUDA_VISIBLE_DEVICES=1
   timeout 120 python3 benchmarks/train_bench.py --models qwen3-0.6b --profile > $OUT/g1.log 2>&1
   echo "== train_bench.py --models qwen3-0.6b --levers 9 --steps 5 --warmup 3" >> $OUT/g1.log
   timeout 120 python3 benchmarks/train_bench.py --models qwen3-0.6b --levers 9 --steps 5 --warmup 3 --json $OUT/levers-0.6b.json >> $OUT/g1.log 2>&1
   echo "== fleetdeck bench $B/qwen3-4b.toml --baseline --json" >> $OUT/g1.log
   timeout 300 bench $B/qwen3-4b.toml --baseline --json > $OUT/bench-qwen3-4b.json 2>> $OUT/g1.log) &
  wait
  grep -E "rel err|timing|check|profile|^  |ERROR|default|cuDNN|reference-strong:|recipe for|Error" $OUT/g*.log | grep -v Warning | head -80
  summarize_benches
fi
if [ "$phase" = a ]; then
  python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'
  nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv
  [ -n "${SKIPCHECK:-}" ] || timeout 120 python3 benchmarks/check_varlen.py 2>&1 | tail -8
  sed -e 's/^output = .*/output = "runs\/e2e-0.6b"/' $B/qwen3-0.6b.toml > $B/e2e.toml
  printf 'max_steps = 6\neval_steps = 3\nsave_steps = 3\n' >> $B/e2e.toml
  timeout 240 fleetdeck train $B/e2e.toml > $OUT/e2e.log 2>&1; echo "fleetdeck train exit $?"
  grep -E "recipe|LoRA|step|saved|finished|failed|Error" $OUT/e2e.log | tail -14
  python3 -c "import json;m=json.load(open('$B/runs/e2e-0.6b/run.json'));print('state',m['state'],[s['state'] for s in m['states']])"
  ls $B/runs/e2e-0.6b $B/runs/e2e-0.6b/checkpoints $B/runs/e2e-0.6b/adapter
  timeout 200 fleetdeck bench $B/qwen3-0.6b.toml --baseline --json > $OUT/bench-0.6b.json 2> $OUT/bench-0.6b.err; echo "bench exit $?"
  tail -3 $OUT/bench-0.6b.err; python3 -c "import json;r=json.load(open('$OUT/bench-0.6b.json'));[print(x['recipe'],x['tokens_per_second'],x['median_s_per_step'],x['mfu'],x['peak_memory_gib'],x['description']) for x in r['results']];print('ratio',r.get('ratio'))"
fi
if [ "$phase" = b ]; then
  timeout 250 python3 benchmarks/train_bench.py --models qwen3-0.6b --levers 1,2,3,4,5,6,8 --steps 5 --warmup 3 --json $OUT/levers-0.6b.json 2> $OUT/levers-0.6b.err | tee $OUT/levers-0.6b.txt
  timeout 330 python3 benchmarks/train_bench.py --models qwen3-1.7b,qwen3-4b --baseline --levers 2 --steps 10 --warmup 3 --json $OUT/bench-1.7b-4b.json 2> $OUT/bench-1.7b-4b.err | tee $OUT/bench-1.7b-4b.txt
  grep -E "Error|error" $OUT/*.err | grep -v triton_kernel_wrap | tail -5
fi
if [ "$phase" = c ]; then  # on nvidia-h200-x2: clean per-model benches in parallel, then gpus = 2
  (CUDA_VISIBLE_DEVICES=0 timeout 240 fleetdeck bench $B/qwen3-4b.toml --baseline --json > $OUT/c-4b.json 2> $OUT/c-4b.err) &
  (export CUDA_VISIBLE_DEVICES=1
   timeout 80 fleetdeck bench $B/qwen3-0.6b.toml --json > $OUT/c-0.6b.json 2> $OUT/c-0.6b.err
   timeout 100 fleetdeck bench $B/qwen3-1.7b.toml --json > $OUT/c-1.7b.json 2> $OUT/c-1.7b.err
   timeout 50 fleetdeck bench $B/qwen3-0.6b.toml --set compile=false --json > $OUT/c-0.6b-nocompile.json 2> $OUT/c-0.6b-nocompile.err) &
  wait
  sed -e 's/^output = .*/output = "runs\/e2e-2gpu"/' $B/qwen3-0.6b.toml > $B/e2e2.toml
  printf 'max_steps = 8\neval_steps = 4\nsave_steps = 4\ngpus = 2\n' >> $B/e2e2.toml
  timeout 120 fleetdeck train $B/e2e2.toml > $OUT/c-2gpu.log 2>&1; echo "2-gpu train exit $?"
  cp $B/runs/e2e-2gpu/progress.jsonl $OUT/c-2gpu-progress.jsonl
  grep -E "recipe|step [0-9]|finished|failed|rror" $OUT/c-2gpu.log | tail -12
  for f in $OUT/c-*.json; do python3 -c "import json,sys;r=json.load(open('$f'));[print('$f'.split('/')[-1],x['recipe'],x['tokens_per_second'],x['median_s_per_step'],x['spread_pct'],x['mfu'],x['peak_memory_gib'],x['description']) for x in r['results']];print('ratio',r.get('ratio'))" || tail -5 ${f%.json}.err; done
fi
if [ "$phase" = d ]; then  # on nvidia-h200-x2, right after c: reference and fleetdeck in one process per model
  (CUDA_VISIBLE_DEVICES=0 timeout 110 fleetdeck bench $B/qwen3-0.6b.toml --baseline > $OUT/d-0.6b.txt 2>/dev/null) &
  (CUDA_VISIBLE_DEVICES=1 timeout 110 fleetdeck bench $B/qwen3-1.7b.toml --baseline > $OUT/d-1.7b.txt 2>/dev/null) &
  wait; cat $OUT/d-*.txt
fi
