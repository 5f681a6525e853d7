"""The bound's rates on this GPU for each model shape and sequence length, and each attention
kernel's forward + backward there against the kernel the run would choose.

    python benchmarks/bound_kernels.py --models qwen3-0.6b,qwen3-1.7b,qwen3-4b
        [--seq-lens 2048,4096] [--kernels fa4,flash,cudnn] [--recipe default] [--json OUT.json]

For each model and seq_len: the rates `fleetdeck bench` measures before a run
(backend/train/bound_rates.py: the bf16 matmul rate over the model's own product shapes, the
chosen attention kernel's forward + backward rate on rows of one seq_len-long document), the
tokens/s they allow when every row is one document (backend/train/bound.py), then every other
kernel named in --kernels timed on the same tensors: its rate, its time against the chosen
kernel's (the baseline, in the same process) and the bound it would allow.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

NEEDS = "a CUDA GPU and the train extra (FlashAttention-4 is timed where it is installed)"

try:
    import torch
    from train_bench import write_run

    from fleetdeck.backend.train import bound, bound_rates
    from fleetdeck.backend.train.models import shapes_of
    from fleetdeck.backend.train.runconfig import load_run_config
    from fleetdeck.backend.train.varlen_kernels import fa4_installed
except ImportError as e:  # --help still works; main() refuses, naming what is missing
    torch = None
    MISSING = str(e)


def unmet() -> str | None:
    """What this machine lacks, or None."""
    if torch is None:
        return f"torch and the trainer cannot be imported ({MISSING}): pip install -e '.[train]'"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU on this machine"
    return None


def one(cfg, kernels: list[str], device) -> dict:
    """The rates for one RUN.toml, then each other kernel against the chosen one."""
    measured = bound_rates.measure(cfg, device)
    model = bound_rates.meta_model(cfg.base_model)
    lin = bound_rates.linears(model)
    s = shapes_of(model)
    kv = int(getattr(model.config, "num_key_value_heads", None) or s.heads)
    n_lora = bound.lora_params(lin, cfg.target_modules, cfg.lora_rank)
    per_token = 4 * sum(i * o for _, i, o in lin) + 6 * n_lora
    per_sq = 6 * measured["attention_layers"] * s.heads * s.head_dim
    rates = bound.rates_of(measured)
    measured["full_rows_tokens_per_second"] = round(
        bound.full_rows_tokens_per_second(cfg.seq_len, per_token, per_sq, rates), 1
    )
    base_ms = measured["attention_ms"]
    tokens = measured["tokens_per_forward"]
    flops = bound.attention_flops(s.heads, s.head_dim, [cfg.seq_len] * (tokens // cfg.seq_len))
    others = {}
    for k in kernels:
        if k == measured["attention_kernel"] or (k == "fa4" and not fa4_installed()):
            continue
        try:
            t = bound_rates.time_attention(
                k, s.heads, kv, s.head_dim, cfg.seq_len, tokens, device, torch.bfloat16
            )
        except Exception as e:  # noqa: BLE001 - a kernel that does not run here is a finding
            others[k] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        r = bound.Rates(rates.matmul, flops / t)
        others[k] = {
            "attention_ms": round(t * 1e3, 3),
            "attention_tflops": round(flops / t / 1e12, 1),
            "time_vs_chosen": round(t * 1e3 / base_ms, 3),
            "full_rows_tokens_per_second": round(
                bound.full_rows_tokens_per_second(cfg.seq_len, per_token, per_sq, r), 1
            ),
        }
    measured["other_kernels"] = others
    measured["flops_terms"] = [per_token, per_sq]
    return measured


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__,
        epilog=f"Needs {NEEDS}.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--models", default="qwen3-0.6b,qwen3-1.7b,qwen3-4b")
    p.add_argument("--seq-lens", default="2048,4096")
    p.add_argument("--kernels", default="fa4,flash,cudnn")
    p.add_argument("--recipe", default="default", help="train_bench.py's RECIPES (r, rows)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    why = unmet()
    if why:
        print(f"bound_kernels.py: {why}; it needs {NEEDS}", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-bound-"))
    (folder / "corpus.jsonl").write_text('{"text": "x"}\n')
    kernels = [k for k in args.kernels.split(",") if k]
    rows = []
    print(f"# {torch.cuda.get_device_name(device)}; kernels {', '.join(kernels)}", flush=True)
    for arch in args.models.split(","):
        for seq in (int(x) for x in args.seq_lens.split(",")):
            cfg = load_run_config(write_run(folder, arch, seq, args.recipe))
            if args.recipe != "default" and cfg.seq_len != seq:
                continue  # a recipe with its own seq_len: once
            r = {"model": arch, "seq_len": cfg.seq_len, **one(cfg, kernels, device)}
            rows.append(r)
            print(
                f"{arch:<11} seq {cfg.seq_len:>5}  matmul {r['matmul_tflops']:6.1f} TFLOP/s  "
                f"attention {r['attention_kernel']} {r['attention_tflops']:6.1f} TFLOP/s "
                f"({r['attention_ms']:.2f} ms)  bound {r['full_rows_tokens_per_second']:>9,.0f} tok/s",
                flush=True,
            )
            for k, o in r["other_kernels"].items():
                if "error" in o:
                    print(f"{'':<22}{k}: {o['error']}", flush=True)
                    continue
                print(
                    f"{'':<22}{k}: {o['attention_tflops']:6.1f} TFLOP/s ({o['attention_ms']:.2f} ms, "
                    f"{o['time_vs_chosen']:.3f}x the chosen kernel's time)  bound "
                    f"{o['full_rows_tokens_per_second']:>9,.0f} tok/s",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": torch.cuda.get_device_name(device), "rows": rows}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
