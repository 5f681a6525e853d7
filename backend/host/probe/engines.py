"""What a serving engine's command line says, for the seats section: which engine it is
(vLLM, SGLang, TGI, llama.cpp, Ollama), the model it serves, and the flags that decide its GPU
memory."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "tgi": 3000, "llama.cpp": 8080, "ollama": 11434}
# the flags that size a seat's memory and context, per engine (both `--f v` and `--f=v`)
MEMORY_FLAGS = (
    "--gpu-memory-utilization",
    "--kv-cache-memory",
    "--kv-cache-memory-bytes",
    "--max-model-len",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--quantization",
    "--dtype",
    "--cpu-offload-gb",
    "--mem-fraction-static",
    "--tp-size",
    "--tp",
    "--context-length",
    "--max-total-tokens",
    "--num-shard",
    "--cuda-memory-fraction",
    "--max-input-tokens",
    "--max-batch-prefill-tokens",
    "-c",
    "--ctx-size",
    "-ngl",
    "--n-gpu-layers",
    "-np",
    "--parallel",
)
MODEL_FLAGS = {
    "vllm": ("--model",),
    "sglang": ("--model-path", "--model"),
    "tgi": ("--model-id",),
    "llama.cpp": ("-m", "--model", "-hf", "--hf-repo"),
    "ollama": (),
}
PYTHONS = re.compile(r"^python[0-9.]*$")


def _base(arg: str) -> str:
    return arg.rpartition("/")[2]


def classify(argv: Sequence[str]) -> str | None:
    """The engine kind an argv belongs to, or None. The program is argv[0], or the script
    after a Python interpreter; `python -m MODULE` names the module."""
    if not argv:
        return None
    progs = [_base(argv[0])]
    if PYTHONS.match(progs[0]) and len(argv) > 1 and not argv[1].startswith("-"):
        progs.append(_base(argv[1]))
    modules = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"]
    for i, a in enumerate(argv[:3]):
        b = _base(a)
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if b == "vllm" and nxt == "serve":
            return "vllm"
        if b == "sglang" and nxt == "serve":
            return "sglang"
        if b == "ollama" and nxt == "serve":
            return "ollama"
    for m in modules:
        if m.startswith("vllm.entrypoints.openai.api_server") or m == "vllm.entrypoints.cli.main":
            return "vllm"
        if m.startswith("sglang.launch_server"):
            return "sglang"
    if "text-generation-launcher" in progs:
        return "tgi"
    if "llama-server" in progs:
        return "llama.cpp"
    return None


def flag_value(argv: Sequence[str], names: Iterable[str]) -> str | None:
    """The value of the last of `names` in argv (`--f v` or `--f=v`), or None."""
    found = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                found = argv[i + 1]
            elif a.startswith(n + "="):
                found = a[len(n) + 1 :]
    return found


def memory_flags(argv: Sequence[str]) -> dict[str, str]:
    """{flag: value} of the memory-deciding flags present in argv."""
    out = {}
    for i, a in enumerate(argv):
        name, eq, val = a.partition("=")
        if name in MEMORY_FLAGS:
            if eq:
                out[name] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[name] = argv[i + 1]
            else:
                out[name] = ""
    return out


def served_model(kind: str, argv: Sequence[str]) -> str | None:
    """The model a seat serves, from its argv (`vllm serve MODEL` or the engine's flag)."""
    m = flag_value(argv, MODEL_FLAGS.get(kind, ()))
    if m is None and kind == "vllm" and "serve" in argv:
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            m = argv[i + 1]
    if m is None and kind == "llama.cpp":
        m = flag_value(argv, ("--alias", "-a"))
    return m
