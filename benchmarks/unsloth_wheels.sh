#!/usr/bin/env bash
# Here (a machine with the package registry): fetch the wheels Unsloth needs on the lent H200
# (Python 3.12, x86-64; torch 2.11+cu130, transformers 5.17, peft 0.21, accelerate, pyarrow,
# pandas, xxhash, typer and rich already there), pare them, and lay them out with
# FlashAttention-4's (benchmarks/fa4_wheels.sh) for two device calls of at most 64 MiB each:
#   .whl1/  every Unsloth wheel and the first part of the 92 MB CUDA 13 DSL library wheel
#   .whl2/  that wheel's second part and FlashAttention-4's other wheels (with liger-kernel)
# so the first call can already install and run Unsloth (benchmarks/unsloth_setup.sh), and the
# second installs FlashAttention-4 (benchmarks/fa4_setup.sh joins the parts, checks the sha256).
# Pared (measured on these versions): unsloth without its `studio/` web app (28.3 -> 2.3 MB),
# bitsandbytes with only its CUDA 13.0 library (43.1 -> 3.6 MB); diffusers and hf_transfer left
# out (Unsloth imports neither when it loads a causal LM from a local folder, offline), and so is
# xformers: its newest wheel, 0.0.35, is built for torch 2.10.0+cu128 (its cpp_lib.json), and
# Unsloth then says "xformers is installed but cannot load with torch ..." and uses PyTorch
# attention; carried, it would push the wheels into a third call.
# Usage: bash benchmarks/unsloth_wheels.sh   (then carry .whl1 in one call and .whl2 in the next)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS="unsloth==2026.10.9 unsloth_zoo==2026.10.9 trl==1.15.0 datasets==4.8.5 dill==0.4.1
multiprocess==0.70.19 bitsandbytes==0.50.2 torchao==0.18.0 cut_cross_entropy==25.1.1
tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.6.1 shtab==1.13.0 msgspec==0.23.0
structlog==26.1.0 json5==0.17.3 nest_asyncio==1.6.0 pydantic==2.14.4 pydantic_core==2.50.5
annotated_types==0.8.0 typing_inspection==0.4.5"
#: bytes one call may carry besides the working tree (64 MiB, less what travels uncarried: tracked
#: and untracked-not-ignored files, and a margin for files that appear before the calls)
tree=$( (git ls-files; git ls-files --others --exclude-standard) | sort -u | tr '\n' '\0' \
  | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s}')
BUDGET=${BUDGET:-$(( 64 * 1048576 - tree - 1500000 ))}
bash benchmarks/fa4_wheels.sh >/dev/null
dl=$(mktemp -d)
plat=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  plat="$plat --platform $p"
done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d "$dl" $WHEELS
python3 - "$dl" <<'EOF'
import base64, hashlib, pathlib, sys, zipfile

def pare(path, drop):
    """Rewrite a wheel without the members `drop` selects, its RECORD to match."""
    src = zipfile.ZipFile(path)
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            name = info.filename
            if drop(name):
                continue
            data = src.read(name)
            if name.endswith(".dist-info/RECORD"):
                lines = [ln for ln in data.decode().splitlines() if ln and not drop(ln.split(",")[0])]
                data = ("\n".join(lines) + "\n").encode()
            out.writestr(info, data)
    tmp.replace(path)

d = pathlib.Path(sys.argv[1])
pare(next(d.glob("unsloth-*.whl")), lambda n: n.startswith("studio/"))
pare(next(d.glob("bitsandbytes-*.whl")),
     lambda n: n.startswith("bitsandbytes/libbitsandbytes_") and "cuda130" not in n)
EOF
# every Unsloth wheel goes with the first call (FlashAttention-4's other wheels with the second);
# the DSL library wheel's first part fills the rest of the first
mv .whl1/*.whl .whl2/
mv "$dl"/*.whl .whl1/
have=$(du -cb .whl1/*.whl | tail -1 | cut -f1)
whole=$(mktemp)
cat .whl1/cu13.part.aa .whl2/cu13.part.ab > "$whole"
rm .whl1/cu13.part.* .whl2/cu13.part.*
first=$(( BUDGET - have - 65536 ))
head -c "$first" "$whole" > .whl1/cu13.part.aa
tail -c +"$(( first + 1 ))" "$whole" > .whl2/cu13.part.ab
rm -rf "$dl" "$whole"
for d in .whl1 .whl2; do
  size=$(du -cb $d | tail -1 | cut -f1)
  [ "$size" -le "$BUDGET" ] || { echo "unsloth_wheels: $d holds $size bytes, over $BUDGET"; exit 1; }
done
du -cb .whl1 | tail -1; du -cb .whl2 | tail -1; echo "budget per call: $BUDGET bytes"
