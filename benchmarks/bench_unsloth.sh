#!/usr/bin/env bash
# Question: how fast does Unsloth train the bench's shapes on one H200, in its own process, with
# each of its gradient checkpointing modes? Runs the Unsloth reference of `fleetdeck bench
# --references unsloth` alone (backend/train/unsloth_reference.py: the random-weight model saved
# as a checkpoint, Unsloth's FastLanguageModel + trl SFTTrainer with sample packing, the batch
# searched in the trainer) for each model in $MODELS (default qwen3-0.6b) and each mode in $GC
# (default off; "off unsloth" adds Unsloth's offloaded checkpointing), 6 timed steps after 2.
# It needs no FlashAttention-4, so it runs in the first call, while fa4_setup.sh still waits for
# .whl2 (carry .whl1 from benchmarks/unsloth_wheels.sh).
# Output: $OUT/unsloth.log and $OUT/unsloth-<model>-<mode>.json.
source benchmarks/device_env.sh; rc=$?; [ $rc = 0 ] || [ $rc = 3 ] || exit $rc
[ "$UNSLOTH_RC" = 0 ] || { echo "bench_unsloth: Unsloth is not installed (unsloth_setup.sh: $UNSLOTH_RC)"; exit 1; }
log=$OUT/unsloth.log
for m in ${MODELS:-qwen3-0.6b}; do
  for g in ${GC:-off}; do
    echo "== unsloth alone: $m, gradient checkpointing $g, --steps ${STEPS:-6} --warmup ${WARMUP:-2}" | tee -a $log
    timeout ${UNSLOTH_TIMEOUT:-400} python3 - "$B/$m.toml" "$g" "$OUT/unsloth-$m-$g.json" <<'PY' 2>> $log
import json, os, sys
from fleetdeck.backend.train.runconfig import load_run_config
from fleetdeck.backend.train.unsloth_reference import measure_unsloth
cfg = load_run_config(sys.argv[1])
r = measure_unsloth(cfg, int(os.environ.get("STEPS", 6)), int(os.environ.get("WARMUP", 2)),
                    lambda m: print(m, file=sys.stderr, flush=True), checkpointing=sys.argv[2])
times, tokens = r["times"], r["tokens"]
r["tokens_per_second"] = round(sum(tokens) / sum(times), 1)
r["median_s_per_step"] = round(sorted(times)[len(times) // 2], 4)
r["peak_memory_gib"] = round(r["peak"] / 2**30, 2)
open(sys.argv[3], "w").write(json.dumps(r, indent=2))
print(cfg.base_model, r["tokens_per_second"], "tok/s", r["median_s_per_step"], "s/step median, peak",
      r["peak_memory_gib"], "GiB, batch", r["batch"], "search", r["batch_search"], "|", r["description"])
PY
    echo "exit $?" | tee -a $log
  done
done
grep -E "rror|out of memory|Unsloth:|unsloth:" $log | grep -v Warning | tail -40
