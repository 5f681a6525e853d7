"""Check the flash, FlashAttention-4 and cuDNN varlen attention kernels against per-document SDPA on this GPU
(forward and gradients), that a packed row's per-document losses equal each document run alone,
and time each kernel's forward + backward on 8 rows of 4096 tokens (Qwen3-0.6B heads).

    python benchmarks/check_varlen.py
"""

from __future__ import annotations

import argparse
import sys

NEEDS = (
    "a CUDA GPU and the train extra; it passes only where flash-attn's varlen kernel runs "
    "(FlashAttention-4 and cuDNN are tried where present)"
)

try:
    import torch

    from fleetdeck.backend.train import attention, models, varlen_kernels
except ImportError as e:  # --help still works; main() refuses, naming what is missing
    torch = None
    MISSING = str(e)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def unmet() -> str | None:
    """What this machine lacks for the check, or None."""
    if torch is None:
        return f"torch and the trainer cannot be imported ({MISSING}): pip install -e '.[train]'"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU on this machine"
    return None


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        description=__doc__,
        epilog=f"Needs {NEEDS}.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)
    why = unmet()
    if why:
        print(f"check_varlen.py: {why}; it needs {NEEDS}", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    ok = True
    for lens in ([4096], [1000, 3000, 96], [17, 2048, 1, 2030]):
        cu = torch.tensor(
            [0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev
        )
        T = sum(lens)
        q = torch.randn(T, 16, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(T, 8, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(T, 8, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(T, 16, 128, device=dev, dtype=torch.bfloat16)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = varlen_kernels.varlen_reference(q64, k64, v64, cu, 128**-0.5)
        rgrads = torch.autograd.grad(ref, (q64, k64, v64), g.double())
        for kernel in ("flash", "fa4", "cudnn"):
            try:
                out = varlen_kernels.run_varlen(kernel, q, k, v, cu, max(lens), 128**-0.5)
                grads = torch.autograd.grad(out, (q, k, v), g)
            except Exception as e:  # noqa: BLE001
                print(f"{kernel} ranges {lens}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                ok &= kernel != "flash"
                continue
            errs = [rel(out, ref)] + [rel(a, b) for a, b in zip(grads, rgrads, strict=True)]
            good = all(e < 2e-2 for e in errs)
            ok &= good or kernel != "flash"
            print(
                f"{kernel} ranges {lens}: rel err out {errs[0]:.1e} dq {errs[1]:.1e} dk {errs[2]:.1e} "
                f"dv {errs[3]:.1e} {'ok' if good else 'FAIL'}"
            )
    timing(dev)
    # whole model: packed vs alone
    name = attention.register(force_flash=True)
    m = models.build_model("random:qwen3-0.6b", torch.bfloat16, dev, name, 1)
    from fleetdeck.backend.train.batching import linear_cross_entropy

    docs = [torch.randint(0, 256, (n,), device=dev) for n in (700, 1500, 1896)]

    def loss_of(ds):
        ids = torch.cat(ds)[None]
        pos = torch.cat([torch.arange(len(d), device=dev) for d in ds])[None]
        cu = torch.tensor(
            [0, *torch.tensor([len(d) for d in ds]).cumsum(0).tolist()],
            dtype=torch.int32,
            device=dev,
        )
        labels = torch.cat([torch.cat([d[1:], torch.tensor([-100], device=dev)]) for d in ds])
        h = m.model(
            input_ids=ids, position_ids=pos, cu_seq_lens_q=cu, max_length_q=4096
        ).last_hidden_state[0]
        return h, labels

    with torch.no_grad():
        h_packed, _ = loss_of(docs)
        off = 0
        for d in docs:
            h_alone, lab = loss_of([d])
            a = linear_cross_entropy(h_packed[off : off + len(d)], m.lm_head.weight, lab, 1.0)
            b = linear_cross_entropy(h_alone, m.lm_head.weight, lab, 1.0)
            off += len(d)
            good = abs(float(a) - float(b)) / float(b) < 1e-2
            ok &= good
            print(
                f"doc of {len(d)} tokens: loss packed {float(a):.4f} alone {float(b):.4f} {'ok' if good else 'FAIL'}"
            )
    print("varlen check", "passed" if ok else "FAILED")
    return 0 if ok else 1


def timing(dev) -> None:
    """Forward + backward of each kernel on 8 rows x 4096 tokens, 16 query / 8 KV heads of 128."""
    lens = [4096] * 8
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    t = sum(lens)
    q = torch.randn(t, 16, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(t, 8, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(t, 8, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(t, 16, 128, device=dev, dtype=torch.bfloat16)
    flops = 8 * (4 * 4096 * 4096 * 16 * 128 / 2) * 3.5  # causal; backward 2.5x forward
    for kernel in ("flash", "fa4", "cudnn"):

        def run(kernel=kernel):
            out = varlen_kernels.run_varlen(kernel, q, k, v, cu, 4096, 128**-0.5)
            torch.autograd.grad(out, (q, k, v), g)

        try:
            for _ in range(3):
                run()
            times = []
            for _ in range(10):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                run()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / 1e3)
            med = sorted(times)[5]
            print(
                f"timing {kernel}: forward+backward {med * 1e3:.2f} ms, {flops / med / 1e12:.0f} TFLOP/s"
            )
        except Exception as e:  # noqa: BLE001
            print(f"timing {kernel}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    sys.exit(main())
