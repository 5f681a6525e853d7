"""Check the Triton cross-entropy kernel against float64 on this GPU, then time one chunk of the
output head (8192 tokens, Qwen3's 151,936-token vocabulary, hidden 1024 and 2048) three ways:
the Triton kernel, the torch.compile'd chunk function it replaces (the baseline, same process),
and the eager in-place one.

    python benchmarks/check_ce.py
"""

from __future__ import annotations

import argparse
import sys

NEEDS = "a CUDA GPU, torch and triton (the train extra)"

try:
    import torch

    from fleetdeck.backend.train import batching, ce_kernel
except ImportError as e:  # --help still works; main() refuses, naming what is missing
    torch = None
    MISSING = str(e)


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
        print(f"check_ce.py: {why}; it needs {NEEDS}", file=sys.stderr)
        return 2
    import triton.testing

    dev = torch.device("cuda", 0)
    why = ce_kernel.works(dev, torch.bfloat16, batching._ce_chunk_inplace, batching.IGNORE)
    print(f"ce_kernel.works (bf16 vs the eager chunk): {why or 'passes'}")
    ok = why is None
    gen = torch.Generator(device=dev).manual_seed(5)
    # against float64 on bf16 logits of the real vocabulary
    logits = (torch.randn(512, 151936, device=dev, generator=gen) * 3).to(torch.bfloat16)
    y = torch.randint(0, 151936, (512,), device=dev, generator=gen)
    y[::7] = batching.IGNORE
    ref64 = logits.double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(ref64, y, ignore_index=batching.IGNORE, reduction="sum")
    (ref * 0.01).backward()
    work = logits.clone()
    loss = ce_kernel.ce_rows(work, y, 0.01, batching.IGNORE)
    err_l = abs(float(loss) - float(ref)) / abs(float(ref))
    err_g = float((work.double() - ref64.grad).norm() / ref64.grad.norm())
    print(
        f"vs float64 on 512 x 151936 bf16 logits: loss rel err {err_l:.2e}, gradient rel err {err_g:.2e} "
        "(the gradient is stored in bf16)"
    )
    ok &= err_l < 1e-4 and err_g < 1e-2
    ok &= edge_cases(dev)
    compiled = torch.compile(batching._ce_chunk, dynamic=None)
    for hidden in (1024, 2048):
        h = (torch.randn(8192, hidden, device=dev, generator=gen) * 0.5).to(torch.bfloat16)
        w = (torch.randn(151936, hidden, device=dev, generator=gen) * 0.02).to(torch.bfloat16)
        yy = torch.randint(0, 151936, (8192,), device=dev, generator=gen)
        yy[::9] = batching.IGNORE
        ways = {
            "compiled chunk (baseline)": compiled,
            "Triton kernel": batching._ce_chunk_kernel,
            "eager in-place": batching._ce_chunk_inplace,
        }
        out = {name: fn(h, w, yy, 1e-4) for name, fn in ways.items()}
        base_l, base_g = out["compiled chunk (baseline)"]
        times = {}
        for name, fn in ways.items():
            l_, g_ = out[name]
            d = float((g_.float() - base_g.float()).norm() / base_g.float().norm())
            times[name] = triton.testing.do_bench(
                lambda fn=fn, h=h, w=w, yy=yy: fn(h, w, yy, 1e-4),
                warmup=50,
                rep=300,
                return_mode="median",
            )
            print(
                f"hidden {hidden}: {name:<26} {times[name]:7.3f} ms per 8192-token chunk  "
                f"loss {float(l_):.6e}  gradient vs baseline {d:.1e}"
            )
        mm = triton.testing.do_bench(
            lambda h=h, w=w: (h @ w.t()) @ w, warmup=50, rep=300, return_mode="median"
        )
        print(
            f"hidden {hidden}: the two matmuls alone {mm:7.3f} ms; Triton kernel "
            f"{times['compiled chunk (baseline)'] / times['Triton kernel']:.2f}x the compiled chunk"
        )
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def edge_cases(dev: torch.device) -> bool:
    """The trial at Qwen3's own vocabulary in bf16, a label outside the vocabulary, evaluation's
    loss-only pass, and the kernel -> compiled -> eager chain when each fails on a chunk."""
    ok = True
    why = ce_kernel.works(dev, torch.bfloat16, batching._ce_chunk_inplace, batching.IGNORE, 151936)
    print(f"trial at vocabulary 151936, bf16: {why or 'passes'}")
    ok &= why is None
    gen = torch.Generator(device=dev).manual_seed(9)
    logits = (torch.randn(6, 151936, device=dev, generator=gen) * 2).to(torch.bfloat16)
    for bad in (151936, -7):
        y = torch.tensor([5, 6, bad, 7, batching.IGNORE, 8], device=dev)
        loss = ce_kernel.ce_rows(logits.clone(), y, 1.0, batching.IGNORE)
        print(f"label {bad} outside the vocabulary: loss {float(loss)}")
        ok &= bool(torch.isnan(loss))
    h = (torch.randn(300, 1024, device=dev, generator=gen) * 0.5).to(torch.bfloat16)
    w = (torch.randn(151936, 1024, device=dev, generator=gen) * 0.02).to(torch.bfloat16)
    y = torch.randint(0, 151936, (300,), device=dev, generator=gen)
    with_grad, _ = batching._ce_chunk_kernel(h, w, y, 0.5)
    loss_only, g = batching._ce_chunk_kernel(h, w, y, 0.5, want_grad=False)
    print(
        f"evaluation's loss-only pass: {float(loss_only):.6e} vs {float(with_grad):.6e} with the gradient pass, "
        f"gradient {g}"
    )
    ok &= g is None and float(loss_only) == float(with_grad)
    # the chain: the kernel fails on a chunk, then the compiled chunk does
    real_chunk, real_compile = ce_kernel.chunk, batching._COMPILED.get("fn")
    batching._COMPILED.clear()
    seen = []

    def broken(*a, **k):
        raise RuntimeError("kernel broken on purpose")

    ce_kernel.chunk = broken
    hh = h.clone().requires_grad_()
    try:
        ref = batching.linear_cross_entropy(hh, w, y, 0.5, chunk=128)
        seen.append(batching.ce_kind(dev, 151936, torch.bfloat16))
        batching._COMPILED["fn"] = lambda *a: broken()
        ref2 = batching.linear_cross_entropy(h.clone().requires_grad_(), w, y, 0.5, chunk=128)
        seen.append(batching.ce_kind(dev, 151936, torch.bfloat16))
    finally:
        ce_kernel.chunk = real_chunk
        batching._COMPILED.clear()
        if real_compile is not None:
            batching._COMPILED["fn"] = real_compile
    want = 0.5 * float(with_grad)
    print(
        f"kernel failing, then the compiled chunk failing: ran {seen}, losses {float(ref):.6e} {float(ref2):.6e} "
        f"(the kernel's: {want:.6e})"
    )
    ok &= seen == ["compiled", "eager"] and all(
        abs(float(x) - want) <= 1e-3 * abs(want) for x in (ref, ref2)
    )
    return ok


if __name__ == "__main__":
    sys.exit(main())
