"""What FP8 frozen-base matmuls could give the trainer: a bound, measured on the GPU.

    python benchmarks/fp8_matmuls.py [--models qwen3-0.6b,qwen3-1.7b,qwen3-4b] [--json FILE]

The base weights of a LoRA run are frozen, so each decoder projection costs two products a
micro-batch: the forward (x W^T) and the input's gradient (dy W); no weight gradient. This
times both, for every projection group the trainer runs (q/k/v and gate/up fused, o, down) at
the shapes and tokens per forward of the bench recipe, two ways in the same process:
  bf16 (the baseline, what the trainer runs): `x @ W.T`, `dy @ W`
  fp8: `torch._scaled_mm` on float8_e4m3 with row-wise scales (x and dy by row, W by output
       row for the forward and by input column for the gradient, both copies of W quantized
       once, as a frozen weight allows), timed with the cast of x and dy (one compiled kernel
       each: row max, scale, cast) and without it (what a cast fused into the producing
       kernel's epilogue would leave)
and prints, per shape and per model, the time of each, the ratio against bf16, the relative
error of the fp8 product against the bf16 one, and the bound it puts on the step: the bench's
step time (`--step-s`, SUMMARY.md's figures) less the time saved over all layers and
micro-batches, as tokens/s. A bound, not a build: the LoRA term, the cast's fusion and the
numerics of a run are left out (the error columns say how far a product moves from float32 arithmetic, for fp8 and bf16).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from fleetdeck.backend.host.lib.architectures import shape
from fleetdeck.backend.train.fp8 import Fp8Weight, quant_rows

#: the bench recipe: rows of 4096 tokens per forward, forwards per optimizer step, and the
#: step time of the trainer's final build (SUMMARY.md), tokens per step 8 x 4096
RECIPE = {"qwen3-0.6b": (8, 1, 0.3106), "qwen3-1.7b": (8, 1, 0.5744), "qwen3-4b": (4, 2, 1.3126)}
SEQ = 4096


# one compiled cast per shape (12 shapes over the three models)
torch._dynamo.config.recompile_limit = 64
quant_rows_compiled = torch.compile(quant_rows, dynamic=False)


def timed(fn, reps: int = 20) -> float:
    """Median milliseconds of `fn` over `reps` runs, by CUDA events, after 3 warm-up runs."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def one_shape(tokens: int, k: int, n: int) -> dict:
    """Forward and input-gradient products of a frozen (n x k) weight on `tokens` rows."""
    g = torch.Generator(device="cuda").manual_seed(4919)
    x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-3
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * k**-0.5
    # the weight quantized once for each product, as the trainer does: by output row (forward),
    # by input column (gradient)
    fw = Fp8Weight(w)
    bf_f, bf_g = lambda: x @ w.t(), lambda: dy @ w

    def fp8_f(xq=None, xs=None):
        if xq is None:
            xq, xs = quant_rows_compiled(x)
        return torch._scaled_mm(
            xq, fw.fwd.t(), scale_a=xs, scale_b=fw.fwd_scale, out_dtype=torch.bfloat16
        )

    def fp8_g(dq=None, ds=None):
        if dq is None:
            dq, ds = quant_rows_compiled(dy)
        return torch._scaled_mm(
            dq, fw.grad.t(), scale_a=ds, scale_b=fw.grad_scale, out_dtype=torch.bfloat16
        )

    xq, xs = quant_rows_compiled(x)
    dq, ds = quant_rows_compiled(dy)
    r = {
        "tokens": tokens,
        "k": k,
        "n": n,
        "bf16_ms": timed(bf_f) + timed(bf_g),
        "fp8_ms": timed(fp8_f) + timed(fp8_g),
        "fp8_no_cast_ms": timed(lambda: fp8_f(xq, xs)) + timed(lambda: fp8_g(dq, ds)),
        # each product's error against float32 arithmetic on the same bf16 inputs
        "err_forward": rel_err(fp8_f(), x.float() @ w.float().t()),
        "err_gradient": rel_err(fp8_g(), dy.float() @ w.float()),
        "err_forward_bf16": rel_err(bf_f(), x.float() @ w.float().t()),
        "err_gradient_bf16": rel_err(bf_g(), dy.float() @ w.float()),
    }
    r["tflops_bf16"] = 2 * 2 * tokens * k * n / r["bf16_ms"] / 1e9
    return r


def one_model(model: str, step_s: float | None) -> dict:
    s = shape(model)
    rows, forwards, step = RECIPE[model]
    step = step_s or step
    tokens = rows * SEQ
    hd = s["head_dim"]
    groups = {
        "q/k/v": (s["hidden"], (s["heads"] + 2 * s["kv"]) * hd),
        "o": (s["heads"] * hd, s["hidden"]),
        "gate/up": (s["hidden"], 2 * s["inter"]),
        "down": (s["inter"], s["hidden"]),
    }
    out = {
        "model": model,
        "tokens_per_forward": tokens,
        "forwards_per_step": forwards,
        "layers": s["layers"],
        "step_s": step,
        "shapes": {},
    }
    for name, (k, n) in groups.items():
        out["shapes"][name] = r = one_shape(tokens, k, n)
        print(
            f"{model:<11} {name:<8} {tokens}x{k} by {k}x{n}: bf16 {r['bf16_ms']:.3f} ms "
            f"({r['tflops_bf16']:.0f} TFLOP/s), fp8 {r['fp8_ms']:.3f} ms "
            f"({r['bf16_ms'] / r['fp8_ms']:.2f}x), fp8 without the cast {r['fp8_no_cast_ms']:.3f} ms "
            f"({r['bf16_ms'] / r['fp8_no_cast_ms']:.2f}x); rel. error against float32: fp8 fwd "
            f"{r['err_forward']:.1e}, grad {r['err_gradient']:.1e} (bf16 {r['err_forward_bf16']:.1e}, "
            f"{r['err_gradient_bf16']:.1e})",
            flush=True,
        )
    per = s["layers"] * forwards / 1000.0
    for arm in ("fp8", "fp8_no_cast"):
        saved = per * sum(r["bf16_ms"] - r[f"{arm}_ms"] for r in out["shapes"].values())
        out[f"{arm}_saved_s"] = saved
        out[f"{arm}_bound_tok_s"] = 8 * SEQ / (step - saved)
    base = 8 * SEQ / step
    print(
        f"{model}: base products {per * sum(r['bf16_ms'] for r in out['shapes'].values()):.4f} s of the "
        f"{step:.4f} s step; fp8 saves {out['fp8_saved_s']:.4f} s (bound {out['fp8_bound_tok_s']:,.0f} tok/s, "
        f"{out['fp8_bound_tok_s'] / base:.3f}x the build's {base:,.0f}); with the casts fused away "
        f"{out['fp8_no_cast_saved_s']:.4f} s (bound {out['fp8_no_cast_bound_tok_s']:,.0f} tok/s, "
        f"{out['fp8_no_cast_bound_tok_s'] / base:.3f}x)",
        flush=True,
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="qwen3-0.6b,qwen3-1.7b,qwen3-4b")
    ap.add_argument(
        "--step-s", type=float, default=None, help="the step time to bound (default: SUMMARY.md's)"
    )
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    res = [one_model(m, a.step_s) for m in a.models.split(",")]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
