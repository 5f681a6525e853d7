"""Parity of the fast path with the plain one: the same model shape, seed, corpus and rows,
trained for N steps by `fleetdeck train` twice, and both loss curves and eval losses compared.

  fast:  the trainer's defaults on this machine (FlashAttention-4 or the bundled flash varlen
         kernel, torch.compile'd layers, q/k/v and gate/up fused with the LoRA product joined,
         the Triton cross-entropy kernel)
  plain: per-document SDPA, no torch.compile, projections apart, the eager cross-entropy chunk

Each run is its own process (`python benchmarks/check_parity.py --child ...`, which runs
`train_main` on a RUN.toml with the plain path's keys, PLAIN_KEYS) and writes its run folder; the parent reads
both progress.jsonl files and prints, per step, both losses and their relative gap, then the
eval losses, and the largest relative gap of each. Each child also records, per step, the
wall time, how many graphs torch.compile had built so far, the allocator's reserved memory,
its cudaMalloc retries and Python's garbage collections (`diag-<path>.jsonl`), so a step that
stalls shows its cause.

    python benchmarks/check_parity.py --prepare /tmp/bench          # corpus (train_bench's)
    python benchmarks/check_parity.py --model random:qwen3-0.6b --corpus /tmp/bench/corpus.jsonl \\
        --steps 12 --out /tmp/parity --json parity.json
    python benchmarks/check_parity.py ... --fast-set base_fp8=true --plain-from parity.json   # a lever's parity
    python benchmarks/check_parity.py --model random:tiny --seq-len 64 --steps 12 ...   # on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PATHS = ("fast", "plain")
PLAIN_KEYS = {
    "attention": "sdpa",
    "compile": False,
    "fused_projections": False,
    "liger": False,
    "cross_entropy": "eager",
}


def write_toml(path: Path, values: dict) -> None:
    lines = []
    for k, v in values.items():
        lines.append(f"{k} = {str(v).lower()}" if isinstance(v, bool) else f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")


def child(kind: str, toml: str, diag: str) -> int:
    """One training run of path `kind`, with per-step diagnostics written to `diag`."""
    import gc

    import torch

    from fleetdeck.backend.train import loop
    from fleetdeck.backend.train.main import train_main

    counters = None
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        pass
    collections = {"n": 0}
    gc.callbacks.append(
        lambda phase, info: collections.__setitem__(
            "n", collections["n"] + (phase == "start" and info["generation"] == 2)
        )
    )
    original = loop.Engine.step
    state = {"i": 0}

    def step(self, *a, **kw):
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
        graphs = int(counters["stats"]["unique_graphs"]) if counters is not None else None
        t0 = time.perf_counter()
        out = original(self, *a, **kw)
        if cuda:
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0
        state["i"] += 1
        rec = {
            "step": state["i"],
            "seconds": round(dt, 4),
            "new_graphs": (int(counters["stats"]["unique_graphs"]) - graphs)
            if graphs is not None
            else None,
            "gc_gen2": collections["n"],
        }
        if cuda:
            stats = torch.cuda.memory_stats(self.device)
            rec.update(
                {
                    "reserved_gib": round(torch.cuda.memory_reserved(self.device) / 2**30, 2),
                    "alloc_retries": stats.get("num_alloc_retries", 0),
                    "segments": stats.get("segment.all.current", 0),
                }
            )
        with open(diag, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return out

    loop.Engine.step = step
    return train_main([toml])


def run_path(kind: str, args, out: Path) -> dict:
    folder = out / kind
    values = {
        "name": f"parity-{kind}",
        "base_model": args.model,
        "corpus": str(Path(args.corpus).resolve()),
        "output": str(folder),
        "seq_len": args.seq_len,
        "batch_size": 1,
        "grad_accum": args.rows,
        "max_steps": args.steps,
        "eval_steps": args.eval_steps,
        "save_steps": 10**6,
        "eval_fraction": args.eval_fraction,
        "lr": args.lr,
        "seed": args.seed,
    }
    if kind == "plain":
        values.update(PLAIN_KEYS)
    else:
        values.update(args.fast_keys)
    toml = out / f"{kind}.toml"
    write_toml(toml, values)
    diag = out / f"diag-{kind}.jsonl"
    diag.unlink(missing_ok=True)
    env = dict(os.environ)
    if kind == "fast" and args.log_recompiles:
        env["TORCH_LOGS"] = "recompiles"
    t0 = time.time()
    with open(out / f"{kind}.log", "w") as log:
        rc = subprocess.call(
            [sys.executable, __file__, "--child", kind, str(toml), str(diag)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    progress = (
        [json.loads(x) for x in (folder / "progress.jsonl").read_text().splitlines()]
        if (folder / "progress.jsonl").exists()
        else []
    )
    diags = [json.loads(x) for x in diag.read_text().splitlines()] if diag.exists() else []
    text = (out / f"{kind}.log").read_text()
    recipe = next(
        (x.split(" recipe", 1)[1].lstrip() for x in text.splitlines() if " recipe " in x), None
    )
    recompiles = sum("Recompiling function" in x for x in text.splitlines())
    return {
        "path": kind,
        "exit": rc,
        "wall_s": round(time.time() - t0, 1),
        "progress": progress,
        "diag": diags,
        "recipe": recipe,
        "recompile_lines": recompiles,
    }


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def compare(fast: dict, plain: dict) -> dict:
    """Per-step losses, eval losses and the largest relative gap of each (plain as the reference)."""
    f = {p["step"]: p for p in fast["progress"]}
    p = {q["step"]: q for q in plain["progress"]}
    steps = sorted(set(f) & set(p))
    rows = [
        {
            "step": s,
            "fast": f[s]["loss"],
            "plain": p[s]["loss"],
            "rel_gap": rel(f[s]["loss"], p[s]["loss"]),
            "fast_tok_s": f[s].get("tokens_per_second"),
            "plain_tok_s": p[s].get("tokens_per_second"),
        }
        for s in steps
    ]
    evals = [
        {
            "step": s,
            "fast": f[s]["eval_loss"],
            "plain": p[s]["eval_loss"],
            "rel_gap": rel(f[s]["eval_loss"], p[s]["eval_loss"]),
        }
        for s in steps
        if f[s].get("eval_loss") is not None and p[s].get("eval_loss") is not None
    ]
    return {
        "steps": rows,
        "evals": evals,
        "max_rel_gap_loss": max((r["rel_gap"] for r in rows), default=None),
        "max_rel_gap_eval": max((r["rel_gap"] for r in evals), default=None),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=3, metavar=("PATH", "TOML", "DIAG"), help=argparse.SUPPRESS)
    ap.add_argument("--prepare", metavar="DIR", help="write train_bench's corpus to DIR and exit")
    ap.add_argument("--model", default="random:qwen3-0.6b")
    ap.add_argument("--corpus")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=8, help="rows per optimizer step (grad_accum)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--eval-steps", type=int, default=4)
    ap.add_argument("--eval-fraction", type=float, default=0.05)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=4919)
    ap.add_argument("--out", default="/tmp/parity")
    ap.add_argument("--json", help="also write the comparison as JSON here")
    ap.add_argument("--paths", default="fast,plain")
    ap.add_argument(
        "--log-recompiles", action="store_true", help="TORCH_LOGS=recompiles for the fast run"
    )
    ap.add_argument(
        "--plain-from",
        metavar="JSON",
        help="take the plain run from an earlier --json file (its code path did not change)",
    )
    ap.add_argument(
        "--fast-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RUN.toml key for the fast run only (e.g. base_fp8=true); repeatable",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="reuse a path's finished run in --out (its progress.jsonl holds every step)",
    )
    args = ap.parse_args(argv)
    from fleetdeck.backend.train.bench import _parse_set

    args.fast_keys = _parse_set(args.fast_set, "--fast-set")
    if args.child:
        return child(*args.child)
    if args.prepare:
        return subprocess.call(
            [
                sys.executable,
                str(Path(__file__).with_name("train_bench.py")),
                "--prepare",
                args.prepare,
                "--models",
                "qwen3-0.6b",
            ]
        )
    if not args.corpus:
        ap.error("--corpus is required")
    if args.steps < 12:
        print("check_parity: fewer than 12 steps compare little; running anyway", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for kind in [k.strip() for k in args.paths.split(",") if k.strip()]:
        import shutil

        done = out / kind / "progress.jsonl"
        if kind == "plain" and args.plain_from:
            runs[kind] = json.loads(Path(args.plain_from).read_text())["runs"]["plain"]
            runs[kind]["reused_from"] = args.plain_from
            print(f"== plain: reusing the run recorded in {args.plain_from}", flush=True)
        elif args.keep and done.exists() and len(done.read_text().splitlines()) >= args.steps:
            runs[kind] = json.loads((out / f"{kind}.json").read_text())
            print(f"== {kind}: reusing the finished run in {out / kind}", flush=True)
        else:
            shutil.rmtree(out / kind, ignore_errors=True)
            runs[kind] = run_path(kind, args, out)
            (out / f"{kind}.json").write_text(json.dumps(runs[kind]) + "\n")
        r = runs[kind]
        print(f"== {kind}: exit {r['exit']}, {r['wall_s']} s; {r['recipe']}", flush=True)
        if r["exit"] != 0:
            print((out / f"{kind}.log").read_text()[-3000:], flush=True)
        slow = [d for d in r["diag"] if d["step"] > 2]
        for d in r["diag"]:
            print(
                f"   {kind} step {d['step']:>3}: {d['seconds']:.3f} s  new graphs {d['new_graphs']}  "
                f"gc2 {d['gc_gen2']}  reserved {d.get('reserved_gib', '-')} GiB  "
                f"alloc retries {d.get('alloc_retries', '-')}  segments {d.get('segments', '-')}",
                flush=True,
            )
        if slow:
            med = sorted(d["seconds"] for d in slow)[len(slow) // 2]
            stalls = [d for d in slow if d["seconds"] > 1.5 * med]
            print(
                f"   {kind}: steps after the second: median {med:.3f} s; "
                + (
                    ", ".join(
                        f"step {d['step']} {d['seconds']:.3f} s (new graphs {d['new_graphs']})"
                        for d in stalls
                    )
                    if stalls
                    else "no step over 1.5x the median"
                )
                + f"; recompile log lines {r['recompile_lines']}",
                flush=True,
            )
    if set(PATHS) <= set(runs):
        cmp = compare(runs["fast"], runs["plain"])
        print(
            f"{'step':>4} {'fast loss':>11} {'plain loss':>11} {'rel gap':>9} {'fast tok/s':>11} {'plain tok/s':>11}"
        )
        for r in cmp["steps"]:
            print(
                f"{r['step']:>4} {r['fast']:>11.5f} {r['plain']:>11.5f} {r['rel_gap']:>9.2e} "
                f"{r['fast_tok_s'] or 0:>11,.0f} {r['plain_tok_s'] or 0:>11,.0f}"
            )
        for r in cmp["evals"]:
            print(
                f"eval at step {r['step']}: fast {r['fast']:.5f}  plain {r['plain']:.5f}  rel gap {r['rel_gap']:.2e}"
            )
        print(
            f"largest relative gap: loss {cmp['max_rel_gap_loss']:.2e} over {len(cmp['steps'])} steps; "
            f"eval {cmp['max_rel_gap_eval']:.2e} over {len(cmp['evals'])} evals"
            if cmp["evals"]
            else f"largest relative gap: loss {cmp['max_rel_gap_loss']}; no eval"
        )
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "args": {
                            k: v for k, v in vars(args).items() if k not in ("child", "fast_keys")
                        },
                        "runs": runs,
                        "comparison": cmp,
                    },
                    indent=1,
                )
                + "\n"
            )
        return 0 if all(r["exit"] == 0 for r in runs.values()) else 1
    return 0 if all(r["exit"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
