#!/usr/bin/env bash
# Here (a machine with the package registry): fetch the wheels FlashAttention-4 needs on the lent
# H200 (Python 3.12, x86-64, torch with CUDA 13 already there) plus liger-kernel, and lay them out
# for two device calls: one call carries at most 64 MiB, and the CUDA 13 DSL library wheel alone
# is 92 MB, so it travels split: .whl1/ holds its first half and every other wheel, .whl2/ its
# second half; benchmarks/fa4_setup.sh joins and installs them all on the device.
# Usage: bash benchmarks/fa4_wheels.sh   (then carry .whl1 in one call and .whl2 in the next)
set -euo pipefail
cd "$(dirname "$0")/.."
V=4.8.1
WHEELS="flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==$V nvidia-cutlass-dsl-libs-base==$V
nvidia-cutlass-dsl-libs-core==$V nvidia-cutlass-dsl-libs-cu13==$V quack-kernels==0.6.5
apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 liger-kernel==0.8.5"
dl=$(mktemp -d)
plat=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  plat="$plat --platform $p"
done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d "$dl" $WHEELS
for d in .whl1 .whl2; do  # both git-ignored (.gitignore), so they travel only when carried
  rm -rf "$d"; mkdir -p "$d"
done
big=$(ls "$dl"/nvidia_cutlass_dsl_libs_cu13-*.whl)
(cd "$dl" && sha256sum "$(basename "$big")") > .whl1/SHA256SUMS
half=$(( ($(stat -c %s "$big") + 1) / 2 ))
split -b "$half" "$big" "$dl/cu13.part."
mv "$dl/cu13.part.aa" .whl1/ && mv "$dl/cu13.part.ab" .whl2/
rm "$big"; mv "$dl"/*.whl .whl1/
rm -rf "$dl"
du -sh .whl1 .whl2
