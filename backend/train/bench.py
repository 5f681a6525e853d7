"""`fleetdeck bench RUN.toml`: the operator's throughput probe (warm-up, then timed steps).

Reports median s/step, min-max spread, tokens/s (real tokens only), peak GPU memory and MFU:
FLOPs of a step = tokens*(4*N_matmul + 6*N_lora) + 6*attention_layers*(heads*head_dim)*sum(n^2)
(frozen base: forward and input-gradient matmuls; adapters also get weight gradients; causal
attention over each document piece of n tokens, as the step really fed them), over the bf16
GPU's dense bf16 rate from its datasheet (`mfu`, the headline; `DATASHEET_BF16_TFLOPS`), with the
bf16 matmul rate measured on this card in the same run beside it (`mfu_measured`). Before the run
it also measures the bound's two rates on this card (bound_rates.py: the matmul rate on the
model's own product shapes, the attention kernel's forward + backward rate at the run's seq_len)
and reports each recipe's fraction of the tokens/s they allow (`fraction_of_bound`, bound.py). `--baseline`
also runs three references in the same process (reference.py: `reference-strong`, the strongest
plain Trainer + peft a practitioner would configure, with Liger and no padding; `reference-plain`,
rows padded to the longest of the batch; `reference`, the operator's old recipe); `ratio` is
against reference-strong. `--references unsloth` adds Unsloth, run in its own process on a
checkpoint of the same random weights (unsloth_reference.py), with `ratio_vs_unsloth`; it is
refused up front, naming what is missing, when Unsloth is not importable. Nothing is written to
the run folder.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tomllib
from typing import TYPE_CHECKING

from fleetdeck.backend.fleet.config import ConfigError

from . import bound
from .bench_figures import datasheet_tflops, matmul_peak_tflops, summarize
from .runconfig import RunConfig, load_run_config, setting_value, with_overrides

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch


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
        out[key] = setting_value(f"{source} (--set)", key, value)
    return out


def measure_fleetdeck(cfg: RunConfig, steps: int, warmup: int, log: Callable[..., object]) -> dict:
    """Time the trainer's own step (what `fleetdeck train` runs) on this card."""
    import torch

    from .session import prepare

    compile_disk_caches_off()
    engine, train, _, schedule = prepare(cfg, 0, 1, log)
    cuda = engine.device.type == "cuda"
    times, tokens, flops, attn_sq = [], [], [], []
    per_step: list[dict] = []
    for i in range(warmup + steps):
        if i == warmup and cuda:
            torch.cuda.reset_peak_memory_stats(engine.device)
        if cuda:
            torch.cuda.synchronize(engine.device)
        t0 = time.perf_counter()
        upcoming = schedule.rows(i + 1, 0) if i + 1 < warmup + steps else None
        _, tok, _ = engine.step(train, schedule.rows(i, 0), upcoming)
        dt = time.perf_counter() - t0
        per_step.append(
            {
                "step": i + 1,
                "seconds": round(dt, 4),
                "ranges": sum(len(train.rows[j]) for j in schedule.rows(i, 0)),
            }
        )
        if i >= warmup:
            times.append(dt)
            tokens.append(tok)
            flops.append(engine.step_flops(tok, engine.last_attn_sq))
            attn_sq.append(engine.last_attn_sq)
    peak = torch.cuda.max_memory_allocated(engine.device) if cuda else None
    s = engine.shapes
    out = {
        "recipe": "fleetdeck",
        "description": engine.recipe.describe(len(engine.layers)),
        "flops_per_token": engine.flops_per_token(),
        "times": times,
        "tokens": tokens,
        "flops": flops,
        "attn_sq": attn_sq,
        "peak": peak,
        "adapted_modules": len(engine.plan.modules),
        "device": engine.device,
        "flops_terms": (
            4 * engine.n_matmul + 6 * engine.n_lora,
            6 * engine.attention_layers * s.heads * s.head_dim,
        ),
        "packing": engine.packing,
        "packing_off": engine.recipe.packing_off,
        "per_step": per_step,
    }
    del engine, train
    _free()
    return out


def _bound_rates(cfg: RunConfig, device: torch.device, log: Callable[..., object]) -> dict | None:
    """The bound's rates measured on this card (bound_rates.py), None off CUDA or where the
    measurement fails (said in the log: the run is timed all the same)."""
    if device.type != "cuda":
        return None
    try:
        # deferred: bound_rates imports torch (seconds; `fleetdeck bench --help` runs without it)
        from .bound_rates import measure

        return measure(cfg, device, log)
    except Exception as e:  # noqa: BLE001 - the bound is a figure beside the run, not the run
        log(
            f"bound not measured: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
        )
        _free()
        return None


def compile_disk_caches_off() -> None:
    """Turn off torch.compile's on-disk FX-graph and AOTAutograd caches for this process. With them
    warm from an earlier process, the 0.6B bench's step 4 (the first batch with 12 packed ranges)
    took 0.785 s against 0.30-0.32 s for the others on an H200, no recompile logged; with both off
    (the same as TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0) no step stalled, and
    the first step compiled in 14.7 s instead of 7.8 s. The bench times steps, so it turns them off."""
    try:
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = False
    except Exception:  # noqa: BLE001 - an older torch: nothing to turn off
        pass
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    except Exception:  # noqa: BLE001
        pass


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
    p.add_argument(
        "--references",
        default="strong,plain,old",
        metavar="LIST",
        help="with --baseline: which references (strong, plain, old, unsloth), comma-separated",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    return run_bench(args)


def run_bench(args: argparse.Namespace) -> int:
    """`fleetdeck bench` with parsed arguments."""
    if args.steps < 1 or args.warmup < 0:
        print(
            "fleetdeck bench: --steps must be at least 1 and --warmup at least 0", file=sys.stderr
        )
        return 2
    from .reference import RECIPES

    chosen = [
        x.strip() for x in getattr(args, "references", "strong,plain,old").split(",") if x.strip()
    ]
    bad = [x for x in chosen if x not in RECIPES]
    if bad or not chosen:
        print(
            f"fleetdeck bench: --references takes {', '.join(RECIPES)} (comma-separated), not "
            f"{getattr(args, 'references', '')!r}",
            file=sys.stderr,
        )
        return 2
    args.references = [k for k in RECIPES if k in chosen]
    if args.baseline and "unsloth" in args.references:
        from .unsloth_reference import missing, refusal

        lost = missing()
        if lost:
            print(f"fleetdeck bench: {refusal(lost)}", file=sys.stderr)
            return 1
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
        from .main import describe_error

        expected, message = describe_error(e)
        if not expected:
            import traceback

            traceback.print_exc(file=sys.stderr)
        print(f"fleetdeck bench: {message}", file=sys.stderr)
        return 1


def _bench(cfg: RunConfig, args: argparse.Namespace, log: Callable[..., object]) -> dict:
    import torch

    from .session import device_for

    device = device_for(0)
    peak = matmul_peak_tflops(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    datasheet = datasheet_tflops(name) if device.type == "cuda" else None
    rows = cfg.rows_per_step
    log(
        f"bench {cfg.base_model} seq_len {cfg.seq_len} on {name}: {rows} rows per step, "
        f"{args.warmup} warm-up + {args.steps} timed steps"
        + (f"; bf16 matmul peak measured {peak:.0f} TFLOP/s" if peak else "")
        + (f", datasheet {datasheet:g} TFLOP/s (the MFU headline)" if datasheet else "")
    )
    rates = _bound_rates(cfg, device, log)
    # fleetdeck first: reference-strong's `use_liger_kernel` patches transformers' model classes and
    # functions for the whole process (Liger's RMSNorm, RoPE, SwiGLU), which would then run inside
    # fleetdeck's compiled layers and in the other references; so the references follow, strong last
    ours = measure_fleetdeck(cfg, args.steps, args.warmup, log)
    _free()
    refs = []
    failed: dict[str, str] = {}
    if args.baseline:
        from .reference import RECIPES, measure_reference

        for kind in reversed(args.references):
            try:
                if kind == "unsloth":
                    from .unsloth_reference import measure_unsloth

                    refs.append(measure_unsloth(cfg, args.steps, args.warmup, log))
                else:
                    refs.append(measure_reference(cfg, args.steps, args.warmup, log, kind=kind))
            except Exception as e:  # noqa: BLE001 - one reference failing leaves the others measured
                import traceback

                traceback.print_exc(file=sys.stderr)
                first = (str(e).strip().splitlines() or [""])[0][:300]
                log(f"{RECIPES[kind]} failed: {type(e).__name__}: {first}")
                failed[RECIPES[kind]] = f"{type(e).__name__}: {first}"
            _free()
        refs.reverse()
    per_token, per_sq = ours["flops_terms"]
    for r in refs:
        r["flops"] = [
            t * per_token + per_sq * sq for t, sq in zip(r["tokens"], r["attn_sq"], strict=True)
        ]
    results = [ours, *refs]
    report = {
        "run_toml": cfg.source,
        "base_model": cfg.base_model,
        "seq_len": cfg.seq_len,
        "rows_per_step": rows,
        "device": name,
        "peak_tflops_measured": round(peak, 1) if peak else None,
        "datasheet_tflops": datasheet,
        "flops_per_token_at_seq_len": ours["flops_per_token"],
        "flops_formula": "tokens*(4*N_matmul + 6*N_lora) + 6*attention_layers*heads*head_dim*sum(n^2)",
        "adapted_modules": ours["adapted_modules"],
        "packing": ours["packing"],
        "packing_off_reason": ours["packing_off"],
        "bound": rates,
        "results": [],
    }
    measured = bound.rates_of(rates) if rates else None
    if rates and measured:
        rates["full_rows_tokens_per_second"] = round(
            bound.full_rows_tokens_per_second(cfg.seq_len, per_token, per_sq, measured), 1
        )
    for r in results:
        s = summarize(r["times"], r["tokens"], r["flops"], peak, r["peak"], datasheet)
        entry = {"recipe": r["recipe"], "description": r["description"], **s}
        if measured and r.get("attn_sq"):
            terms = (per_token, per_sq, measured)
            entry.update(bound.fraction(r["tokens"], r["attn_sq"], r["times"], *terms))
        for k in (
            "per_step",
            "batch",
            "rows_per_step",
            "gradient_checkpointing",
            "lora_dropout",
            "liger",
            "attention",
            "expandable_segments",
            "batch_search",
            "adapted_modules",
            "unsloth_version",
        ):
            if k in r:
                entry[k] = r[k]
        report["results"].append(entry)
    if failed:
        report["failed"] = failed
    by = {r["recipe"]: r for r in report["results"]}
    ft = by["fleetdeck"]["tokens_per_second"]
    for key, recipe in (
        ("ratio", "reference-strong"),
        ("ratio_vs_plain", "reference-plain"),
        ("ratio_vs_reference", "reference"),
        ("ratio_vs_unsloth", "unsloth"),
    ):
        if recipe in by:
            report[key] = round(ft / by[recipe]["tokens_per_second"], 2)
    if not args.json:
        for r in report["results"]:
            mfu = f"  MFU {100 * r['mfu']:.1f}% of the datasheet" if r["mfu"] is not None else ""
            if r["mfu_measured"] is not None:
                mfu += f" ({100 * r['mfu_measured']:.1f}% of the measured matmul rate)"
            if r.get("fraction_of_bound") is not None:
                mfu += (
                    f"; {100 * r['fraction_of_bound']:.1f}% of the bound "
                    f"{r['bound_tokens_per_second']:,.0f} tok/s"
                )
            mem = (
                f"  peak {r['peak_memory_gib']:.1f} GiB" if r["peak_memory_gib"] is not None else ""
            )
            print(
                f"{r['recipe']:<16} {r['median_s_per_step']:.3f} s/step (min {r['min_s_per_step']:.3f}, "
                f"max {r['max_s_per_step']:.3f}, spread {r['spread_pct']:.1f}%)  "
                f"{r['tokens_per_second']:,.0f} tok/s{mem}{mfu}  [{r['description']}]"
            )
        said = [
            f"{report[k]:.2f}x {what}"
            for k, what in (
                ("ratio", "the strongest plain Trainer + peft configuration (reference-strong)"),
                ("ratio_vs_plain", "padded rows (reference-plain)"),
                ("ratio_vs_reference", "the operator's old recipe (reference)"),
                ("ratio_vs_unsloth", "Unsloth in its own process (unsloth)"),
            )
            if k in report
        ]
        if said:
            print("ratio            " + "; ".join(said))
    return report


__all__ = ["bench_main", "measure_fleetdeck", "run_bench"]
