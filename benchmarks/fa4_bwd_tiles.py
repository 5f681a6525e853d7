"""Which FlashAttention-4 backward tile is fastest on this Hopper GPU at the trainer's shapes?

For each tile a RUN.toml can name in `fa4_backward_tile` ("auto" is FA4's own 64 x 128), this
times FA4's varlen forward + backward (causal, head_dim 128) on 8 rows of 4096 tokens packed as
documents of uneven length, at the heads of Qwen3-0.6B/1.7B (16 query, 8 key/value) and Qwen3-4B
(32 / 8), and checks its gradients against float64 per-document SDPA on a small batch. A tile that
fails to build or to agree is reported and skipped. The last line names the fastest tile on the
0.6B heads (`best <name> <speed-up over auto>`), which benchmarks/levers.sh then measures in the
trainer.

    python benchmarks/fa4_bwd_tiles.py [--json tiles.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from fleetdeck.backend.train import attention

HEADS = {"0.6B/1.7B": (16, 8), "4B": (32, 8)}
LENS = [4096, 2500, 1596, 4096, 900, 3196, 4096, 3000, 1096, 4096, 4096]   # 32,768 tokens


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def check(tile: str, dev) -> float:
    """The worst relative error of out, dq, dk, dv against float64 per-document SDPA."""
    attention.set_fa4_backward_tile(tile)
    gen = torch.Generator(device=dev).manual_seed(1)
    lens = [300, 17, 1000, 731]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    t = sum(lens)
    q, k, v = (torch.randn(t, h, 128, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
               for h in (16, 8, 8))
    g = torch.randn(t, 16, 128, device=dev, dtype=torch.bfloat16, generator=gen)
    out = attention.run_varlen("fa4", q, k, v, cu, max(lens), 128 ** -0.5)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = attention.varlen_reference(*ref_in, cu, 128 ** -0.5)
    ref_grads = torch.autograd.grad(ref, ref_in, g.double())
    return max(rel(a, b) for a, b in zip((out, *grads), (ref, *ref_grads), strict=True))


def time_tile(tile: str, heads: tuple[int, int], dev) -> float:
    """Median ms of one forward + backward over the packed batch."""
    import triton.testing

    attention.set_fa4_backward_tile(tile)
    cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    t = sum(LENS)
    hq, hk = heads
    q = torch.randn(t, hq, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(t, hk, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(t, hk, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(t, hq, 128, device=dev, dtype=torch.bfloat16)

    def step():
        out = attention.run_varlen("fa4", q, k, v, cu, max(LENS), 128 ** -0.5)
        torch.autograd.grad(out, (q, k, v), g)

    step()
    return triton.testing.do_bench(step, warmup=10, rep=300, return_mode="median")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    if not attention.fa4_installed():
        print("flash-attn-4 is not installed here")
        return 1
    results: dict[str, dict] = {}
    for tile in ("auto", *attention.FA4_SM90_BACKWARD_TILES):
        try:
            err = check(tile, dev)
            times = {name: time_tile(tile, heads, dev) for name, heads in HEADS.items()}
        except Exception as e:  # noqa: BLE001 - a tile that does not build is reported, not fatal
            first = (str(e).strip().splitlines() or [""])[0][:160]
            print(f"{tile:<18} failed: {type(e).__name__}: {first}", flush=True)
            results[tile] = {"error": f"{type(e).__name__}: {first}"}
            continue
        results[tile] = {"max_rel_err": err, "ms": times}
        print(f"{tile:<18} worst rel. error {err:.1e}  "
              + "  ".join(f"{n} {ms:.3f} ms" for n, ms in times.items()), flush=True)
    attention.set_fa4_backward_tile("auto")
    base = results.get("auto", {}).get("ms", {}).get("0.6B/1.7B")
    good = {t: r["ms"]["0.6B/1.7B"] for t, r in results.items() if "ms" in r and r["max_rel_err"] < 2e-2}
    best = min(good, key=good.get) if good else "auto"
    speed = base / good[best] if base and best in good else 1.0
    print(f"best {best} {speed:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tiles": results, "best": best, "speedup_vs_auto": speed}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
