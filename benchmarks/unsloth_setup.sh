#!/usr/bin/env bash
# On a lent H200, fresh or warm: install Unsloth's wheels (benchmarks/unsloth_wheels.sh; they
# travel in .whl1/, beside the first part of FlashAttention-4's CUDA 13 library) into /tmp/usite,
# all in ONE `pip install --no-deps --no-index --target` call, kept apart from FlashAttention-4's
# /tmp/site so the bench's own process never sees Unsloth's trl, torchao or pydantic: only the
# Unsloth process gets /tmp/usite (FLEETDECK_UNSLOTH_PYTHONPATH, set by device_env.sh). The wheels
# are kept in /tmp/unsloth-wheels while the machine stays warm. Exit 0 ready, 3 no wheels here yet.
set -u
store=/tmp/unsloth-wheels site=/tmp/usite
mkdir -p "$store"
for d in .whl .whl1 .whl2; do
  [ -d "$d" ] && cp -n "$d"/*.whl "$store"/ 2>/dev/null
done
check() {
  PYTHONPATH=$site python3 -c 'import importlib.metadata as m; print("unsloth ready:", *(f"{n} {m.version(n)}" for n in ("unsloth", "unsloth_zoo", "trl", "datasets", "bitsandbytes", "torchao", "transformers", "peft", "torch")))'
}
if [ -f $site/.unsloth-installed ] && check 2>/dev/null; then exit 0; fi
ls "$store"/unsloth-*.whl >/dev/null 2>&1 || { echo "unsloth_setup: no Unsloth wheels carried (.whl1 from benchmarks/unsloth_wheels.sh)"; exit 3; }
files=$(ls "$store"/*.whl | grep -vE '/(flash_attn_4|nvidia_cutlass|quack_kernels|apache_tvm_ffi|torch_c_dlpack_ext|liger_kernel)[-_]')
# shellcheck disable=SC2086
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $site $files \
  || { echo "unsloth_setup: pip install failed"; exit 1; }
check || { echo "unsloth_setup: installed, but its metadata does not read"; exit 1; }
touch $site/.unsloth-installed
