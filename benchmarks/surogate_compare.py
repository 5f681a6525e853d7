"""fleetdeck on Surogate's configuration against Surogate's published figures for the same card.

    python benchmarks/surogate_compare.py bench-qwen3-0.6b-surogate.json [...]

Reads `fleetdeck bench --json` reports of the `surogate` recipe (`train_bench.py --prepare DIR
--recipe surogate` writes its RUN.tomls: seq_len 2048, 2 x 4 rows a step, packing, LoRA r 16 /
alpha 32 on the seven projections) and prints, for each shape, fleetdeck's tokens/s beside
Surogate's bf16 and fp8 rows for the card the report names, with the ratios and the goal (at
least 1.3x the bf16 figure and above the fp8 one). Surogate is not installable from the package
registries here, so its published table is the baseline. Source: PUBLISHED_SOURCE. Surogate's
tokens/s is batch x grad accum x max_seq_length over seconds per iteration (every row counted
full); fleetdeck's is real tokens over the summed step times, so its packed rows' few empty
places count against it. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PUBLISHED_SOURCE = (
    "github.com/invergent-ai/surogate, benchmarks/speed.md (the stored copy at commit 1097702): "
    "'GPU: 1x NVIDIA H200' and 'GPU: 1x NVIDIA H100 SXM' tables"
)
#: card -> model -> (Surogate bf16, Surogate fp8, Unsloth bf16 as Surogate ran it), tokens/s
PUBLISHED: dict[str, dict[str, tuple[float, float, float]]] = {
    "H200": {
        "qwen3-0.6b": (65_200, 62_000, 21_700),
        "qwen3-1.7b": (39_000, 40_800, 21_400),
        "qwen3-4b": (18_300, 20_500, 12_800),
    },
    "H100 SXM": {
        "qwen3-0.6b": (62_000, 58_000, 24_500),
        "qwen3-1.7b": (37_500, 37_500, 23_000),
        "qwen3-4b": (17_500, 18_700, 13_100),
    },
}
GOAL_VS_BF16 = 1.3


def card(device: str) -> str | None:
    """Which published table a torch device name matches (an H100 PCIe or NVL matches none)."""
    if "H200" in device:
        return "H200"
    if "H100" in device and "PCIe" not in device and "NVL" not in device:
        return "H100 SXM"
    return None


def row(report: dict) -> dict:
    """One shape's comparison from a bench report."""
    arch = report["base_model"].split(":", 1)[-1]
    ours = next(r for r in report["results"] if r["recipe"] == "fleetdeck")
    which = card(report["device"])
    out = {
        "model": arch,
        "device": report["device"],
        "tokens_per_second": ours["tokens_per_second"],
        "full_rows_tokens_per_second": round(
            report["rows_per_step"] * report["seq_len"] / ours["median_s_per_step"], 1
        ),
        "fraction_of_bound": ours.get("fraction_of_bound"),
        "table": which,
    }
    pub = PUBLISHED.get(which or "", {}).get(arch)
    if pub:
        bf16, fp8, unsloth = pub
        t = ours["tokens_per_second"]
        out.update(
            surogate_bf16=bf16,
            surogate_fp8=fp8,
            unsloth_bf16=unsloth,
            vs_bf16=round(t / bf16, 3),
            vs_fp8=round(t / fp8, 3),
            goal_met=t >= GOAL_VS_BF16 * bf16 and t > fp8,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("reports", nargs="*", metavar="BENCH.json")
    p.add_argument("--json", default=None, help="write the rows here too")
    args = p.parse_args(argv)
    rows = []
    for path in args.reports:
        try:
            rows.append(row(json.loads(Path(path).read_text())))
        except (OSError, ValueError, KeyError, StopIteration) as e:
            print(f"surogate_compare.py: {path}: {type(e).__name__}: {e}", file=sys.stderr)
    print(f"# baseline: Surogate's published rows, {PUBLISHED_SOURCE}")
    for r in rows:
        if "vs_bf16" not in r:
            print(
                f"{r['model']:<11} {r['tokens_per_second']:>9,.0f} tok/s on {r['device']}: no published row for this card"
            )
            continue
        bound = f"{100 * r['fraction_of_bound']:.1f}%" if r.get("fraction_of_bound") else "-"
        print(
            f"{r['model']:<11} fleetdeck {r['tokens_per_second']:>9,.0f} tok/s "
            f"({r['full_rows_tokens_per_second']:,.0f} counted as Surogate counts)  "
            f"Surogate {r['table']} bf16 {r['surogate_bf16']:,.0f}: {r['vs_bf16']:.2f}x; "
            f"fp8 {r['surogate_fp8']:,.0f}: {r['vs_fp8']:.2f}x  goal {'met' if r['goal_met'] else 'NOT met'}; "
            f"bound fraction {bound}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"source": PUBLISHED_SOURCE, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
