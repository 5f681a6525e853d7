#!/usr/bin/env bash
# On the lent H200: put FlashAttention-4 (flash-attn-4 and its CuTe DSL wheels) in /tmp/site.
# The CUDA 13 DSL library wheel (92 MB) is larger than one device call carries, so it travels
# split in two (.whl1/bigpart.aa, .whl2/bigpart.ab) and is joined here.
set -e
mkdir -p /tmp/parts
[ -d .whl1 ] && cp -n .whl1/* /tmp/parts/ 2>/dev/null || true
[ -d .whl2 ] && cp -n .whl2/* /tmp/parts/ 2>/dev/null || true
if [ ! -d /tmp/site/flash_attn ]; then
  cat /tmp/parts/bigpart.aa /tmp/parts/bigpart.ab > /tmp/parts/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
  md5sum /tmp/parts/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/parts/*.whl
fi
mkdir -p /tmp/fd/fleetdeck && ln -sfn "$PWD/backend" /tmp/fd/fleetdeck/backend && ln -sfn "$PWD/tui" /tmp/fd/fleetdeck/tui
# pip --target leaves the DSL's .pth unread (it puts nvidia_cutlass_dsl/dsl_packages on sys.path),
# so that folder goes on PYTHONPATH here: `source` this file to keep it, as gpu_session.sh sets it too
export PYTHONPATH=/tmp/fd:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
