"""Do a checkpoint's activations have outlier channels? For each decoder layer's q_proj and
down_proj, the largest per-channel |input| over a few corpus rows divided by the median channel's,
printed and written as JSON for each model named (median over layers and the largest).

    python benchmarks/outliers.py --models /tmp/pre,random:qwen3-0.6b --corpus /tmp/bench/corpus.jsonl \\
        --json outliers.json

Needs torch and transformers (fleetdeck[train]); a CUDA GPU for the real shapes (CPU otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys


def ratios(name: str, rows: list[list[int]]) -> dict:
    import torch

    from fleetdeck.backend.train.models import build_model

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = build_model(name, torch.bfloat16 if cuda else torch.float32, device, "sdpa", 4919)
    stats: dict[str, list[float]] = {"q_proj": [], "down_proj": []}

    def hook(kind):
        def record(_mod, inp):
            a = inp[0].float().abs().flatten(0, -2).amax(0)
            stats[kind].append(float(a.max() / a.median()))

        return record

    for n, mod in model.named_modules():
        kind = n.rsplit(".", 1)[-1]
        if kind in stats:
            mod.register_forward_pre_hook(hook(kind))
    with torch.no_grad():
        model(input_ids=torch.tensor(rows, device=device))
    return {
        k: {"median_over_layers": sorted(v)[len(v) // 2], "max": max(v)} for k, v in stats.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models", required=True, help="comma list: local checkpoint folders or random:<arch>"
    )
    ap.add_argument("--corpus", required=True, help='a .jsonl corpus of {"text": ...} lines')
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2048, help="bytes (tokens) per row")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    with open(args.corpus) as f:
        texts = [json.loads(x)["text"] for x in f if x.strip()][: args.rows]
    rows = [list(t.encode("utf-8")[: args.tokens]) for t in texts]
    rows = [r for r in rows if len(r) == args.tokens]
    if not rows:
        ap.error(f"no document in {args.corpus} has {args.tokens} bytes")
    out = {name: ratios(name, rows) for name in args.models.split(",")}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
