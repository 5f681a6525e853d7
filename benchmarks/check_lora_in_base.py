"""Check and time the fused groups' LoRA product joined to the base matmul on this GPU.

For the q/k/v and gate/up groups of the Qwen3 0.6B and 1.7B shapes (8 x 4096 tokens, r = 32 per
projection), one compiled forward and backward (RMSNorm before, the group, SiLU-and-multiply or
a sum after, as in a decoder layer) runs two ways in one process: the LoRA product apart from
the base matmul (the baseline, RUN.toml's `lora_in_base = false`) and joined to it; each is compared
with float64 arithmetic on the same bf16 inputs.

    python benchmarks/check_lora_in_base.py
"""

from __future__ import annotations

import argparse
import sys

NEEDS = "a CUDA GPU, torch and triton (the train extra)"

try:
    import torch

    from fleetdeck.backend.train import fused
except ImportError as e:  # --help still works; main() refuses, naming what is missing
    torch = None
    MISSING = str(e)

SHAPES = {  # name -> (hidden, group output widths)
    "0.6B q/k/v": (1024, (2048, 1024, 1024)),
    "0.6B gate/up": (1024, (3072, 3072)),
    "1.7B q/k/v": (2048, (2048, 1024, 1024)),
    "1.7B gate/up": (2048, (6144, 6144)),
}


def layer(x, norm, w, a, b, widths, joined):
    h = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * norm
    if joined:
        out = fused._LoraInBase.apply(h, w, a, b)
    else:
        out = torch.nn.functional.linear(h, w) + torch.nn.functional.linear(
            torch.nn.functional.linear(h, a), b
        )
    parts = out.split(widths, -1)
    if len(parts) == 2:
        return torch.nn.functional.silu(parts[0]) * parts[1]
    return parts[0] + torch.cat([parts[1], parts[2]], -1)


def run(x, norm, w, a, b, g, widths, joined):
    """(median ms of one compiled forward and backward, the gradients of x, A and B)."""
    import triton.testing

    fn = torch.compile(lambda x, a, b: layer(x, norm, w, a, b, widths, joined))

    def step():
        xs, as_, bs = (t.detach().requires_grad_() for t in (x, a, b))
        fn(xs, as_, bs).backward(g)
        return xs.grad, as_.grad, bs.grad

    grads = step()
    return triton.testing.do_bench(step, warmup=10, rep=200, return_mode="median"), grads


def unmet() -> str | None:
    """What this machine lacks for the check, or None."""
    if torch is None:
        return f"torch and the trainer cannot be imported ({MISSING}): pip install -e '.[train]'"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU on this machine"
    try:
        import triton.testing  # noqa: F401
    except ImportError as e:
        return f"triton cannot be imported ({e})"
    return None


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        description=__doc__,
        epilog=f"Needs {NEEDS}.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)
    why = unmet()
    if why:
        print(f"check_lora_in_base.py: {why}; it needs {NEEDS}", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev).manual_seed(3)
    ok = True
    for name, (hidden, widths) in SHAPES.items():
        rank = 32 * len(widths)
        bf = torch.bfloat16
        x = torch.randn(8 * 4096, hidden, device=dev, generator=gen).to(bf)
        norm = (1 + 0.1 * torch.randn(hidden, device=dev, generator=gen)).to(bf)
        w = (torch.randn(sum(widths), hidden, device=dev, generator=gen) * hidden**-0.5).to(bf)
        a = (torch.randn(rank, hidden, device=dev, generator=gen) * hidden**-0.5).to(bf)
        b = (torch.randn(sum(widths), rank, device=dev, generator=gen) * 0.05).to(bf)
        g = torch.randn(8 * 4096, widths[0], device=dev, generator=gen).to(bf)
        times, grads = {}, {}
        for joined in (False, True):
            times[joined], grads[joined] = run(x, norm, w, a, b, g, widths, joined)
        x64, a64, b64 = (t.detach().double().requires_grad_() for t in (x, a, b))
        layer(x64, norm.double(), w.double(), a64, b64, widths, False).backward(g.double())
        ref = (x64.grad, a64.grad, b64.grad)
        errs = {
            j: [
                float((gr.double() - r).norm() / r.norm())
                for gr, r in zip(grads[j], ref, strict=True)
            ]
            for j in grads
        }
        print(
            f"{name:<13} apart {times[False]:7.3f} ms  joined {times[True]:7.3f} ms  "
            f"({times[False] / times[True]:.3f}x)  grad x/A/B rel err vs float64: apart "
            + "/".join(f"{e:.1e}" for e in errs[False])
            + "  joined "
            + "/".join(f"{e:.1e}" for e in errs[True])
        )
        ok &= all(ej <= 2 * ea + 1e-3 for ej, ea in zip(errs[True], errs[False], strict=True))
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
