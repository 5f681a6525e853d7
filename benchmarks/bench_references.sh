#!/usr/bin/env bash
# Question: how fast is the trainer against the strongest plain Hugging Face Trainer + peft
# configuration (reference-strong: Liger, documents flattened under FlashAttention-4, the batch
# searched inside the Trainer), padded rows (reference-plain) and the operator's old recipe
# (reference), in the same process? `fleetdeck bench RUN.toml --baseline --json --steps 6
# --warmup 2`: fleetdeck first, then the references (Liger patches transformers' classes for the
# whole process, so reference-strong runs last). The 0.6B shape with all three references, the
# 1.7B and 4B shapes against reference-strong (REFS_BIG to change), each in its own process.
# One call holds 600 s: run it as MODELS=qwen3-0.6b, then MODELS="qwen3-1.7b qwen3-4b".
# On a lent H200: carry .whl1 in one call (stored; exit 3), then .whl2 in the next.
source benchmarks/device_env.sh; rc=$?; [ $rc = 0 ] || exit $rc
for m in ${MODELS:-qwen3-0.6b qwen3-1.7b qwen3-4b}; do
  refs=strong,plain,old; [ $m = qwen3-0.6b ] || refs=${REFS_BIG:-strong}
  MODELS=$m REFS=$refs bash benchmarks/bench_figures.sh
done
