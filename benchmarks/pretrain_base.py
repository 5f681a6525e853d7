"""A base checkpoint whose weights are not random, for judging `base_fp8` on activations that
look trained (random weights have no outlier channels).

Pre-trains every parameter of a built-in shape (`random:<arch>`, the trainer's own construction
and seed) on a corpus of train_bench's kind (random words; written here with its own seed, so the
fine-tune's corpus is text of the same kind the model has not seen), for --seconds or --steps,
with AdamW under bf16 autocast, and saves a local checkpoint folder that RUN.toml's `base_model`
can name: config, bf16 safetensors, and a byte-level tokenizer whose ids are the trainer's byte
tokens (byte b is token b, 256 end of text, 257 padding). Prints the loss at the start, every
--log-every steps and at the end, and writes them with the held-out loss before and after to
`pretrain.json` in the folder.

    python benchmarks/pretrain_base.py --out /tmp/pre --seconds 200            # on a GPU
    python benchmarks/pretrain_base.py --arch tiny --seq-len 64 --steps 4 --out /tmp/pre   # a CPU check

Needs torch, transformers and tokenizers (fleetdeck[train]); a GPU for the real shapes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def byte_tokenizer(folder: Path) -> None:
    """A transformers tokenizer in `folder` that encodes text as its UTF-8 bytes (token = byte)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # the byte-level pre-tokenizer's alphabet: GPT-2's map of each byte to a printable character
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    extra = iter(range(256, 512))
    vocab = {chr(b if b in keep else next(extra)): b for b in range(256)}
    vocab.update({"<|endoftext|>": 256, "<|pad|>": 257})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|pad|>"
    ).save_pretrained(str(folder))


def rows_of(docs: list[str], seq_len: int) -> list[list[int]]:
    """The documents' bytes joined by end-of-text and cut into rows of seq_len + 1 tokens."""
    flat: list[int] = []
    for d in docs:
        flat.extend(d.encode("utf-8"))
        flat.append(256)
    n = (len(flat) - 1) // seq_len
    return [flat[i * seq_len : (i + 1) * seq_len + 1] for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="qwen3-0.6b", help="a built-in random: architecture")
    ap.add_argument("--out", required=True, help="the checkpoint folder to write")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=8, help="rows per optimizer step")
    ap.add_argument("--micro", type=int, default=2, help="rows per forward")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument(
        "--seconds", type=float, default=0.0, help="train this long (after the first step)"
    )
    ap.add_argument(
        "--steps", type=int, default=0, help="or this many steps (the smaller bound wins)"
    )
    ap.add_argument("--corpus-mib", type=float, default=24.0)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=4919)
    args = ap.parse_args(argv)
    if args.seconds <= 0 and args.steps <= 0:
        ap.error("give --seconds or --steps")
    if args.rows % args.micro:
        ap.error("--rows must be a multiple of --micro")

    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).parent))
    from train_bench import write_corpus

    from fleetdeck.backend.train.models import build_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "pretrain-corpus.jsonl"
    write_corpus(corpus, int(args.corpus_mib * 2**20), seed=args.seed)
    docs = [json.loads(x)["text"] for x in corpus.read_text().splitlines() if x.strip()]
    corpus.unlink()
    rows = rows_of(docs, args.seq_len)
    held, rows = rows[: max(1, len(rows) // 50)][:16], rows[max(1, len(rows) // 50) :]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = build_model(f"random:{args.arch}", torch.float32, device, "sdpa", args.seed)
    for p in model.parameters():
        p.requires_grad_(True)
    model.train()
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda
    )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)

    def loss_of(batch: list[list[int]]) -> torch.Tensor:
        t = torch.tensor(batch, device=device)
        with autocast:
            logits = model(input_ids=t[:, :-1]).logits
        return F.cross_entropy(logits.float().flatten(0, 1), t[:, 1:].flatten())

    @torch.no_grad()
    def held_loss() -> float:
        model.eval()
        v = sum(
            float(loss_of(held[i : i + args.micro])) * len(held[i : i + args.micro])
            for i in range(0, len(held), args.micro)
        ) / len(held)
        model.train()
        return v

    warm = 30
    total = args.steps or 10**9
    record = {
        "arch": args.arch,
        "seq_len": args.seq_len,
        "rows": args.rows,
        "lr": args.lr,
        "held_loss_before": held_loss(),
        "losses": [],
    }
    print(
        f"pretrain {args.arch}: {len(rows)} rows of {args.seq_len}, held-out loss at the start "
        f"{record['held_loss_before']:.4f} (ln 258 = {math.log(258):.4f})",
        flush=True,
    )
    t0, step, cursor = None, 0, 0
    while step < total and (t0 is None or not args.seconds or time.time() - t0 < args.seconds):
        lr = args.lr * min(1.0, (step + 1) / warm)
        for g in opt.param_groups:
            g["lr"] = lr
        acc = 0.0
        for _ in range(args.rows // args.micro):
            batch = [rows[(cursor + i) % len(rows)] for i in range(args.micro)]
            cursor += args.micro
            loss = loss_of(batch) / (args.rows // args.micro)
            loss.backward()
            acc += float(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if t0 is None:
            t0 = time.time()
        record["losses"].append(round(acc, 5))
        if step == 1 or step % args.log_every == 0:
            print(f"step {step:>5}: loss {acc:.4f}  ({time.time() - t0:.0f} s)", flush=True)
    record["steps"] = step
    record["seconds"] = round(time.time() - (t0 or time.time()), 1)
    record["tokens"] = step * args.rows * args.seq_len
    record["held_loss_after"] = held_loss()
    print(
        f"pretrain {args.arch}: {step} steps, {record['tokens']:,} tokens in {record['seconds']} s; "
        f"loss {record['losses'][0]:.4f} -> {record['losses'][-1]:.4f}; held-out "
        f"{record['held_loss_before']:.4f} -> {record['held_loss_after']:.4f}",
        flush=True,
    )
    del opt
    model.to(torch.bfloat16).save_pretrained(str(out), safe_serialization=True)
    byte_tokenizer(out)
    (out / "pretrain.json").write_text(json.dumps(record) + "\n")
    print(f"saved {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
