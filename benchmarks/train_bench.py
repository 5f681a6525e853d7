"""Speed figures for the trainer: the reference recipe vs fleetdeck's, and each lever's effect.

    python benchmarks/train_bench.py --models qwen3-0.6b,qwen3-1.7b,qwen3-4b [--baseline]
        [--levers projections-apart,lora-apart,cross_entropy="compiled"] [--steps 10]
        [--warmup 3] [--seq-len 4096] [--recipe default|surogate] [--json OUT.json]

Writes a synthetic corpus (long documents of random words; bytes are tokens with the built-in
tokenizer) and one RUN.toml per model into a temporary folder, then runs, in one process:
the reference recipe (with --baseline), fleetdeck's default recipe for this card, and (with
--levers) that recipe with one lever changed at a time: a lever is a name in LEVERS or RUN.toml keys
as KEY=VALUE, so every variant the bench measures is a recipe a RUN.toml can ask for. Step time depends on shapes, dtype and
kernels, not on weight values or text, so random weights and random words measure the real thing.
Prints a table; the last column is tokens/s over fleetdeck's default measured in the same run
(each lever alone against the default; with --baseline, the two references too).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

from fleetdeck.backend.train import batching
from fleetdeck.backend.train.bench import _parse_set, measure_fleetdeck
from fleetdeck.backend.train.bench_figures import datasheet_tflops, matmul_peak_tflops, summarize
from fleetdeck.backend.train.runconfig import load_run_config, with_overrides

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "gradient tensor kernel adapter checkpoint memory throughput sequence attention"
).split()

#: named levers: each is RUN.toml keys changed against the default recipe (`--levers` also takes
#: KEY=VALUE pairs joined by '+', e.g. micro_batch=4+gradient_checkpointing=true)
LEVERS: dict[str, dict] = {
    "no-compile": {"compile": False},
    "liger": {"liger": True},
    "lora-dropout": {"lora_dropout": 0.05},
    "micro-batch-1": {"micro_batch": 1},
    "micro-batch-2": {"micro_batch": 2},
    "micro-batch-4": {"micro_batch": 4},
    "checkpointing": {"gradient_checkpointing": True},
    "attention-fa2": {"attention": "varlen"},
    "attention-cudnn": {"attention": "cudnn"},
    "projections-apart": {"fused_projections": False},
    "lora-apart": {"lora_in_base": False},
    "ce-compiled": {"cross_entropy": "compiled"},
    "ce-eager": {"cross_entropy": "eager"},
    "base-fp8": {"base_fp8": True},
}


def lever(spec: str) -> tuple[str, dict]:
    """(label, RUN.toml overrides) of one `--levers` item: a name in LEVERS, or KEY=VALUE[+KEY=VALUE]."""
    if spec in LEVERS:
        return spec, LEVERS[spec]
    if "=" not in spec:
        raise SystemExit(
            f"train_bench.py: unknown lever {spec!r} (named: {', '.join(LEVERS)}; or KEY=VALUE)"
        )
    return spec, _parse_set(spec.split("+"), "--levers")


def write_corpus(path: Path, n_bytes: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    out, total = [], 0
    while total < n_bytes:
        length = rng.randint(6000, 30000)
        words, size = [], 0
        while size < length:
            w = rng.choice(WORDS)
            words.append(w)
            size += len(w) + 1
        text = " ".join(words)
        out.append(json.dumps({"text": text}))
        total += len(text)
    path.write_text("\n".join(out) + "\n")


#: the bench's recipes (`--recipe`): RUN.toml keys beside the model, corpus and seed. "default" is
#: the operator's own (8 rows of seq_len a step, r 32); "surogate" is the configuration of
#: Surogate's published speed table (invergent-ai/surogate, benchmarks/speed.md: max_seq_length
#: 2048, per-device batch 2 x gradient accumulation 4, packing, LoRA r 16 / alpha 32 on the seven
#: projections), written as <arch>-surogate.toml; its seq_len is fixed at 2048
RECIPES: dict[str, dict] = {
    "default": {"batch_size": 1, "grad_accum": 8, "lora_rank": 32, "lora_alpha": 64},
    "surogate": {
        "seq_len": 2048,
        "batch_size": 2,
        "grad_accum": 4,
        "lora_rank": 16,
        "lora_alpha": 32,
    },
}


def write_run(folder: Path, arch: str, seq_len: int, recipe: str = "default") -> Path:
    keys = {"seq_len": seq_len, **RECIPES[recipe]}
    stem = arch if recipe == "default" else f"{arch}-{recipe}"
    toml = folder / f"{stem}.toml"
    toml.write_text(f"""name = "bench-{stem}"
base_model = "random:{arch}"
corpus = "corpus.jsonl"
output = "runs/{stem}"
seq_len = {keys["seq_len"]}
batch_size = {keys["batch_size"]}
grad_accum = {keys["grad_accum"]}
lora_rank = {keys["lora_rank"]}
lora_alpha = {keys["lora_alpha"]}
lora_dropout = 0.0
target_modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
eval_fraction = 0.01
seed = 4919
""")
    return toml


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="qwen3-0.6b")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--baseline", action="store_true")
    p.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="default",
        help="the RUN.toml keys: default (the operator's) or surogate (Surogate's published "
        "configuration: seq_len 2048, 2 x 4 rows a step, r 16 / alpha 32)",
    )
    p.add_argument(
        "--levers",
        default="",
        help="comma list of lever names (LEVERS) or KEY=VALUE[+KEY=VALUE], or 'all'",
    )
    p.add_argument("--json", default=None)
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile 2 steps of the default recipe (after warm-up) and print where GPU time goes",
    )
    p.add_argument(
        "--prepare",
        metavar="DIR",
        default=None,
        help="only write the corpus and one RUN.toml per model into DIR (for `fleetdeck bench`)",
    )
    args = p.parse_args(argv)
    folder = Path(args.prepare or tempfile.mkdtemp(prefix="fleetdeck-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    need = max(4 << 20, (args.steps + args.warmup + 2) * 8 * args.seq_len * 2)
    write_corpus(folder / "corpus.jsonl", need)
    if args.prepare:
        for arch in args.models.split(","):
            print(write_run(folder, arch, args.seq_len, args.recipe))
        return 0
    import torch
    import torch._dynamo
    import torch._inductor.config

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    peak = matmul_peak_tflops(device)
    datasheet = (
        datasheet_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"# {name}; bf16 matmul measured {peak or 0:.0f} TFLOP/s; seq_len {args.seq_len}; "
        f"{args.warmup} warm-up + {args.steps} timed steps of 8 rows",
        flush=True,
    )
    if args.profile:
        for arch in args.models.split(","):
            profile(
                load_run_config(write_run(folder, arch, args.seq_len, args.recipe)), args.warmup
            )
        return 0
    chosen = (
        list(LEVERS.items())
        if args.levers == "all"
        else [lever(x) for x in args.levers.split(",") if x]
    )
    rows = []
    for arch in args.models.split(","):
        cfg = load_run_config(write_run(folder, arch, args.seq_len, args.recipe))
        variants = [("fleetdeck default", {})]
        variants += list(chosen)
        if args.baseline:
            variants += [
                ("reference-strong", "strong"),
                ("reference-plain", "plain"),
                ("reference", "old"),
            ]
        ref_tps = None
        terms = None
        for label, change in variants:
            # each variant compiles afresh: a switch read only while the backward is traced (or an
            # inductor setting) would otherwise reuse the previous variant's compiled layers
            torch._dynamo.reset()
            batching._COMPILED.clear()  # a fallback taken in one variant must not carry into the next
            try:
                if label.startswith("reference"):
                    from fleetdeck.backend.train.reference import measure_reference

                    r = measure_reference(cfg, args.steps, args.warmup, lambda m: None, kind=change)
                    r["flops"] = [
                        t * terms[0] + terms[1] * sq
                        for t, sq in zip(r["tokens"], r["attn_sq"], strict=True)
                    ]
                else:
                    r = measure_fleetdeck(
                        with_overrides(cfg, **change), args.steps, args.warmup, lambda m: None
                    )
                    terms = terms or r["flops_terms"]
                s = summarize(r["times"], r["tokens"], r["flops"], peak, r["peak"], datasheet)
                if label == "fleetdeck default":
                    ref_tps = s["tokens_per_second"]
                row = {
                    "model": arch,
                    "variant": label,
                    "description": r["description"],
                    **s,
                    "vs_default": round(s["tokens_per_second"] / ref_tps, 3) if ref_tps else None,
                }
            except Exception as e:  # noqa: BLE001 - one failing lever must not stop the others
                traceback.print_exc(file=sys.stderr)
                row = {"model": arch, "variant": label, "error": f"{type(e).__name__}: {e}"[:300]}
            finally:
                torch.cuda.empty_cache() if torch.cuda.is_available() else None
            rows.append(row)
            _print(row)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": name, "peak_tflops": peak, "rows": rows}, indent=2)
        )
    return 0


def profile(cfg, warmup: int) -> None:
    """GPU time of 2 optimizer steps by kernel family, then the 25 costliest kernels."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from fleetdeck.backend.train.session import prepare

    engine, train, _, schedule = prepare(cfg, 0, 1, lambda m: None)
    for i in range(warmup):
        engine.step(train, schedule.rows(i, 0), schedule.rows(i + 1, 0))
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(warmup, warmup + 2):
            engine.step(train, schedule.rows(i, 0), schedule.rows(i + 1, 0))
        torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / 2
    print(
        f"# {engine.recipe.describe(engine.shapes.layers)}; {wall * 1e3:.1f} ms wall per step (profiled)"
    )
    idle_gaps(prof)
    events = [
        e
        for e in prof.key_averages()
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0)
    ]
    rows = sorted(
        (
            (
                getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0),
                e.key,
                e.count,
            )
            for e in prof.key_averages()
        ),
        reverse=True,
    )
    total = sum(t for t, _, _ in rows) or 1
    families = {}
    for t, key, _ in rows:
        k = key.lower()
        fam = (
            "attention"
            if "flash" in k or "fmha" in k or "cudnn" in k or "attention" in k
            else "matmul"
            if "gemm" in k or "sm90" in k or "cutlass" in k or "matmul" in k or "mm" == k[-2:]
            else "triton (compiled elementwise)"
            if "triton" in k
            else "copy/cast"
            if "copy" in k or "cast" in k or "memcpy" in k
            else "optimizer"
            if "adam" in k or "foreach" in k
            else "other"
        )
        families[fam] = families.get(fam, 0) + t
    print(
        f"# profile {cfg.base_model}: {total / 2e3:.1f} ms GPU time per step; {len(events)} kernels",
        flush=True,
    )
    for fam, t in sorted(families.items(), key=lambda x: -x[1]):
        print(f"  {fam:<32} {100 * t / total:5.1f}%  {t / 2e3:8.1f} ms/step")
    for t, key, n in rows[:25]:
        print(f"  {t / 2e3:8.2f} ms/step  x{n // 2:<5} {key[:110]}")


def idle_gaps(prof) -> None:
    """Where the GPU waited: the idle time between kernels over the profiled steps, and the
    longest waits with the kernels either side."""
    spans = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if e.device_type.name == "CUDA"
    )
    gaps, reach, before = [], None, ""
    for s, e, name in spans:
        if reach is not None and s > reach:
            gaps.append((s - reach, before, name))
        if reach is None or e > reach:
            reach, before = e, name
    idle = sum(g for g, _, _ in gaps)
    big = [g for g in gaps if g[0] >= 20]
    print(
        f"# GPU idle between kernels: {idle / 2e3:.1f} ms per step in {len(gaps) // 2} gaps; "
        f"{sum(g for g, _, _ in big) / 2e3:.1f} ms in {len(big) // 2} gaps of 20 us or more"
    )
    for g, a, b in sorted(gaps, reverse=True)[:12]:
        print(f"  idle {g / 1e3:7.2f} ms  after {a[:60]}  before {b[:60]}")


def _print(r: dict) -> None:
    if "error" in r:
        print(f"{r['model']:<11} {r['variant']:<24} ERROR {r['error']}", flush=True)
        return
    ratio = f"{r['vs_default']:.3f}x" if r.get("vs_default") else "-"
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"  # of the datasheet rate
    if r.get("mfu_measured"):
        mfu += f" ({100 * r['mfu_measured']:.1f}% measured)"
    mem = f"{r['peak_memory_gib']:.1f}" if r.get("peak_memory_gib") is not None else "-"
    print(
        f"{r['model']:<11} {r['variant']:<24} {r['median_s_per_step']:7.3f} s/step "
        f"(spread {r['spread_pct']:4.1f}%) {r['tokens_per_second']:9,.0f} tok/s  MFU {mfu:>6}  "
        f"peak {mem:>6} GiB  {ratio:>6}  [{r['description']}]",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
