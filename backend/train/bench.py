"""`fleetdeck bench RUN.toml`: the operator's throughput probe (warm-up, then timed steps).

Reports median s/step, min-max spread, tokens/s (real tokens only), peak GPU memory and MFU:
FLOPs per token = 4*N_matmul + 6*N_lora + 6*layers*(heads*head_dim)*seq_len (frozen base:
forward and input-gradient matmuls; adapters also get weight gradients; causal attention), over
the bf16 matmul rate measured on this card in the same run. `--baseline` also runs the
reference recipe (transformers Trainer + peft, SDPA, gradient checkpointing, batch 1 padded to
seq_len) in the same process and prints the ratio. Nothing is written to the run folder.
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


def summarize(times: list[float], tokens: list[int], flops_per_token: float, peak_tflops: float | None,
              peak_bytes: int | None, datasheet: float | None) -> dict:
    """Median s/step, spread, tokens/s, memory and MFU of timed steps."""
    med = statistics.median(times)
    tok_s = sum(tokens) / sum(times)
    achieved = flops_per_token * tok_s / 1e12
    return {"median_s_per_step": round(med, 4), "min_s_per_step": round(min(times), 4),
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


def analytic_flops_per_token(cfg: RunConfig) -> float:
    """The MFU formula's FLOPs per token for `cfg`'s model and targets (counted on a meta-device copy)."""
    import torch
    from torch import nn

    from .lora import plan_targets
    from .models import build_model, shapes_of

    model = build_model(cfg.base_model, torch.bfloat16, torch.device("meta"), "sdpa", cfg.seed)
    plan = plan_targets(model, cfg.target_modules)
    mods = dict(model.named_modules())
    n_lora = sum(cfg.lora_rank * (mods[n].in_features + mods[n].out_features) for n in plan.modules)
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    s = shapes_of(model)
    return 4 * n_matmul + 6 * n_lora + 6 * s.layers * s.heads * s.head_dim * cfg.seq_len


def measure_fleetdeck(cfg: RunConfig, steps: int, warmup: int, log) -> dict:
    """Time the trainer's own step (what `fleetdeck train` runs) on this card."""
    import torch

    from .session import prepare

    engine, train, _, schedule = prepare(cfg, 0, 1, log)
    cuda = engine.device.type == "cuda"
    times, tokens = [], []
    for i in range(warmup + steps):
        if i == warmup and cuda:
            torch.cuda.reset_peak_memory_stats(engine.device)
        if cuda:
            torch.cuda.synchronize(engine.device)
        t0 = time.perf_counter()
        _, tok, _ = engine.step(train, schedule.rows(i, 0))
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
            tokens.append(tok)
    peak = torch.cuda.max_memory_allocated(engine.device) if cuda else None
    out = {"recipe": "fleetdeck", "description": engine.recipe.describe(len(engine.layers)),
           "flops_per_token": engine.flops_per_token(), "times": times, "tokens": tokens, "peak": peak,
           "adapted_modules": len(engine.plan.modules), "device": engine.device}
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
    results = []
    if args.baseline:
        from .reference import measure_reference

        ref = measure_reference(cfg, args.steps, args.warmup, log)
        results.append(ref)
    ours = measure_fleetdeck(cfg, args.steps, args.warmup, log)
    results.insert(0, ours)
    report = {"run_toml": cfg.source, "base_model": cfg.base_model, "seq_len": cfg.seq_len,
              "rows_per_step": rows, "device": name, "peak_tflops_measured": round(peak, 1) if peak else None,
              "datasheet_tflops": datasheet, "flops_per_token": ours["flops_per_token"],
              "adapted_modules": ours["adapted_modules"], "results": []}
    for r in results:
        s = summarize(r["times"], r["tokens"], ours["flops_per_token"], peak, r["peak"], datasheet)
        report["results"].append({"recipe": r["recipe"], "description": r["description"], **s})
    if len(report["results"]) == 2:
        a, b = report["results"]
        report["ratio"] = round(a["tokens_per_second"] / b["tokens_per_second"], 2)
    if not args.json:
        for r in report["results"]:
            mfu = f"  MFU {100 * r['mfu']:.1f}%" if r["mfu"] is not None else ""
            mem = f"  peak {r['peak_memory_gib']:.1f} GiB" if r["peak_memory_gib"] is not None else ""
            print(f"{r['recipe']:<10} {r['median_s_per_step']:.3f} s/step (min {r['min_s_per_step']:.3f}, "
                  f"max {r['max_s_per_step']:.3f}, spread {r['spread_pct']:.1f}%)  "
                  f"{r['tokens_per_second']:,.0f} tok/s{mem}{mfu}  [{r['description']}]")
        if "ratio" in report:
            print(f"ratio      {report['ratio']:.2f}x the reference recipe's tokens/s")
    return report


__all__ = ["bench_main", "matmul_peak_tflops", "measure_fleetdeck", "run_bench", "summarize"]
