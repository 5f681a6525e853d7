"""`fleetdeck bench RUN.toml`: the operator's throughput probe (warm-up, then timed steps).

Reports median s/step, min-max spread, tokens/s (real tokens only), peak GPU memory and MFU:
FLOPs of a step = tokens*(4*N_matmul + 6*N_lora) + 6*attention_layers*(heads*head_dim)*sum(n^2)
(frozen base: forward and input-gradient matmuls; adapters also get weight gradients; causal
attention over each document piece of n tokens, as the step really fed them), over the bf16
matmul rate measured on this card in the same run. `--baseline` also runs two references in the
same process (`reference`: the operator's old recipe; `reference-strong`: the strongest plain
Trainer + peft configuration that fits, see reference.py); `ratio` is against the strong one,
`ratio_vs_reference` against the old recipe. Nothing is written to the run folder.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tomllib

from fleetdeck.backend.config import ConfigError

from .runconfig import RunConfig, _value, load_run_config, with_overrides

DATASHEET_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "GB10": 104.0}


def _parse_set(items: list[str], source: str) -> dict:
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out[key] = _value(f"{source} (--set)", key, value)
    return out


def summarize(times: list[float], tokens: list[int], flops: list[float], peak_tflops: float | None,
              peak_bytes: int | None, datasheet: float | None) -> dict:
    """Median s/step, spread, tokens/s, memory and MFU of timed steps (`flops`: each step's)."""
    med = statistics.median(times)
    tok_s = sum(tokens) / sum(times)
    achieved = sum(flops) / sum(times) / 1e12
    return {"flops_per_token": round(sum(flops) / max(1, sum(tokens))),"median_s_per_step": round(med, 4), "min_s_per_step": round(min(times), 4),
            "max_s_per_step": round(max(times), 4),
            "spread_pct": round(100 * (max(times) - min(times)) / med, 2),
            "tokens_per_step": round(sum(tokens) / len(tokens), 1),
            "tokens_per_second": round(tok_s, 1), "achieved_tflops": round(achieved, 1),
            "mfu": round(achieved / peak_tflops, 4) if peak_tflops else None,
            "mfu_datasheet": round(achieved / datasheet, 4) if datasheet else None,
            "peak_memory_gib": round(peak_bytes / 2**30, 2) if peak_bytes is not None else None}


def matmul_peak_tflops(device) -> float | None:
    """bf16 8192^3 matmul rate on random data (median of 10), the MFU denominator."""
    import torch

    if device.type != "cuda":
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del a, b
    return 2 * 8192**3 / statistics.median(times) / 1e12


def measure_fleetdeck(cfg: RunConfig, steps: int, warmup: int, log) -> dict:
    """Time the trainer's own step (what `fleetdeck train` runs) on this card."""
    import torch

    from .session import prepare

    engine, train, _, schedule = prepare(cfg, 0, 1, log)
    cuda = engine.device.type == "cuda"
    times, tokens, flops = [], [], []
    for i in range(warmup + steps):
        if i == warmup and cuda:
            torch.cuda.reset_peak_memory_stats(engine.device)
        if cuda:
            torch.cuda.synchronize(engine.device)
        t0 = time.perf_counter()
        upcoming = schedule.rows(i + 1, 0) if i + 1 < warmup + steps else None
        _, tok, _ = engine.step(train, schedule.rows(i, 0), upcoming)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
            tokens.append(tok)
            flops.append(engine.step_flops(tok, engine.last_attn_sq))
    peak = torch.cuda.max_memory_allocated(engine.device) if cuda else None
    s = engine.shapes
    out = {"recipe": "fleetdeck", "description": engine.recipe.describe(len(engine.layers)),
           "flops_per_token": engine.flops_per_token(), "times": times, "tokens": tokens, "flops": flops,
           "peak": peak, "adapted_modules": len(engine.plan.modules), "device": engine.device,
           "flops_terms": (4 * engine.n_matmul + 6 * engine.n_lora,
                           6 * engine.attention_layers * s.heads * s.head_dim),
           "packing": engine.packing, "packing_off": engine.recipe.packing_off}
    del engine, train
    _free()
    return out


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def bench_main(argv: list[str] | None = None) -> int:
    """Entry point of `fleetdeck bench`; returns the exit status."""
    p = argparse.ArgumentParser(prog="fleetdeck bench")
    p.add_argument("run_toml", metavar="RUN.toml")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    return run_bench(args)


def run_bench(args) -> int:
    """`fleetdeck bench` with parsed arguments."""
    if args.steps < 1 or args.warmup < 0:
        print("fleetdeck bench: --steps must be at least 1 and --warmup at least 0", file=sys.stderr)
        return 2
    try:
        cfg = load_run_config(args.run_toml)
        cfg = with_overrides(cfg, **_parse_set(args.set, cfg.source))
    except ConfigError as e:
        print(f"fleetdeck bench: {e}", file=sys.stderr)
        return 2
    quiet = args.json
    log = (lambda m: print(m, file=sys.stderr)) if quiet else print
    import contextlib

    try:
        # transformers' Trainer prints its own log lines: keep stdout for the JSON document
        with contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext():
            report = _bench(cfg, args, log)
        if quiet:
            print(json.dumps(report, indent=2))
        return 0
    except Exception as e:  # noqa: BLE001
        from .main import _describe

        expected, message = _describe(e)
        if not expected:
            import traceback

            traceback.print_exc(file=sys.stderr)
        print(f"fleetdeck bench: {message}", file=sys.stderr)
        return 1


def _bench(cfg: RunConfig, args, log) -> dict:
    import torch

    from .session import device_for

    device = device_for(0)
    peak = matmul_peak_tflops(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    datasheet = next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in name), None)
    rows = cfg.rows_per_step
    log(f"bench {cfg.base_model} seq_len {cfg.seq_len} on {name}: {rows} rows per step, "
        f"{args.warmup} warm-up + {args.steps} timed steps"
        + (f"; bf16 matmul peak measured {peak:.0f} TFLOP/s" if peak else ""))
    refs = []
    if args.baseline:
        from .reference import measure_reference

        refs.append(measure_reference(cfg, args.steps, args.warmup, log, strong=True))
        _free()
        refs.append(measure_reference(cfg, args.steps, args.warmup, log, strong=False))
        _free()
    ours = measure_fleetdeck(cfg, args.steps, args.warmup, log)
    per_token, per_sq = ours["flops_terms"]
    for r in refs:
        r["flops"] = [t * per_token + per_sq * sq for t, sq in zip(r["tokens"], r["attn_sq"], strict=True)]
    results = [ours, *refs]
    report = {"run_toml": cfg.source, "base_model": cfg.base_model, "seq_len": cfg.seq_len,
              "rows_per_step": rows, "device": name, "peak_tflops_measured": round(peak, 1) if peak else None,
              "datasheet_tflops": datasheet, "flops_per_token_at_seq_len": ours["flops_per_token"],
              "flops_formula": "tokens*(4*N_matmul + 6*N_lora) + 6*attention_layers*heads*head_dim*sum(n^2)",
              "adapted_modules": ours["adapted_modules"],
              "packing": ours["packing"], "packing_off_reason": ours["packing_off"], "results": []}
    for r in results:
        s = summarize(r["times"], r["tokens"], r["flops"], peak, r["peak"], datasheet)
        entry = {"recipe": r["recipe"], "description": r["description"], **s}
        for k in ("batch", "gradient_checkpointing", "lora_dropout"):
            if k in r:
                entry[k] = r[k]
        report["results"].append(entry)
    by = {r["recipe"]: r for r in report["results"]}
    if "reference-strong" in by:
        ft = by["fleetdeck"]["tokens_per_second"]
        report["ratio"] = round(ft / by["reference-strong"]["tokens_per_second"], 2)
        report["ratio_vs_reference"] = round(ft / by["reference"]["tokens_per_second"], 2)
    if not args.json:
        for r in report["results"]:
            mfu = f"  MFU {100 * r['mfu']:.1f}%" if r["mfu"] is not None else ""
            mem = f"  peak {r['peak_memory_gib']:.1f} GiB" if r["peak_memory_gib"] is not None else ""
            print(f"{r['recipe']:<16} {r['median_s_per_step']:.3f} s/step (min {r['min_s_per_step']:.3f}, "
                  f"max {r['max_s_per_step']:.3f}, spread {r['spread_pct']:.1f}%)  "
                  f"{r['tokens_per_second']:,.0f} tok/s{mem}{mfu}  [{r['description']}]")
        if "ratio" in report:
            print(f"ratio            {report['ratio']:.2f}x the strongest plain Trainer + peft configuration "
                  f"(reference-strong); {report['ratio_vs_reference']:.2f}x the operator's old recipe (reference)")
    return report


__all__ = ["bench_main", "matmul_peak_tflops", "measure_fleetdeck", "run_bench", "summarize"]
