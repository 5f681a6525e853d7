#!/usr/bin/env bash
# On a lent H200, fresh or warm: install FlashAttention-4 (flash-attn-4, the CuTe DSL with its
# -libs-base, -libs-core and -libs-cu13 wheels, quack-kernels, apache-tvm-ffi, torch-c-dlpack-ext)
# and liger-kernel into /tmp/site, all in ONE `pip install --target` call (installed one by one,
# a later --target install replaces the shared nvidia_cutlass_dsl folder and leaves the DSL
# without its core; the DSL imports only when -libs-core sits beside -libs-base and -libs-cu13).
# The wheels come from benchmarks/fa4_wheels.sh: .whl1/ (every wheel and the first half of the
# 92 MB CUDA 13 library wheel) and .whl2/ (its second half) travel in two calls one after the
# other (one call carries 64 MiB); each call's halves are kept in /tmp/fa4-parts while the machine
# stays warm, so run this script in both calls: the first only stores its half and says what is
# still missing (exit 3), the second joins, checks the sha256, installs and imports (exit 0).
# Afterwards: export PYTHONPATH=/tmp/fd:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
# (pip --target leaves the DSL's .pth unread; gpu_session.sh sets the same).
set -u
parts=/tmp/fa4-parts
mkdir -p "$parts"
for d in .whl .whl1 .whl2; do
  [ -d "$d" ] && cp -n "$d"/* "$parts"/ 2>/dev/null
done
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
check() { python3 -c 'import flash_attn.cute.interface, cutlass, quack, liger_kernel.transformers; import importlib.metadata as m; print("fa4 ready: flash-attn-4", m.version("flash-attn-4"), "nvidia-cutlass-dsl", m.version("nvidia-cutlass-dsl"), "liger-kernel", m.version("liger-kernel"))'; }
if [ -f /tmp/site/.fa4-installed ] && check 2>/dev/null; then exit 0; fi
big=nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
if [ ! -f "$parts/$big" ]; then
  if [ -f "$parts/cu13.part.aa" ] && [ -f "$parts/cu13.part.ab" ]; then
    cat "$parts/cu13.part.aa" "$parts/cu13.part.ab" > "$parts/$big.tmp" && mv "$parts/$big.tmp" "$parts/$big"
    if ! (cd "$parts" && sha256sum -c SHA256SUMS); then
      echo "fa4_setup: the joined $big does not match SHA256SUMS"; rm -f "$parts/$big"; exit 1
    fi
  else
    have=$(cd "$parts" && ls cu13.part.* 2>/dev/null | tr '\n' ' ')
    echo "fa4_setup: holding ${have:-no part}; the other half of $big comes in the next call (.whl1 and .whl2)"
    exit 3
  fi
fi
need="flash_attn_4-*.whl nvidia_cutlass_dsl-4*.whl nvidia_cutlass_dsl_libs_base-*.whl nvidia_cutlass_dsl_libs_core-*.whl
$big quack_kernels-*.whl apache_tvm_ffi-*.whl torch_c_dlpack_ext-*.whl liger_kernel-*.whl"
files=()
for n in $need; do
  f=$(cd "$parts" && ls $n 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "fa4_setup: missing $n in .whl1/.whl2 (run benchmarks/fa4_wheels.sh here)"; exit 1; }
  files+=("$parts/$f")
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${files[@]}" \
  || { echo "fa4_setup: pip install failed"; exit 1; }
check || { echo "fa4_setup: installed, but flash_attn.cute does not import"; exit 1; }
touch /tmp/site/.fa4-installed
