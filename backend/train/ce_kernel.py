"""Cross-entropy over a block of the output head's logits, gradient written in place (Triton).

One program per row: an online max and sum of exponentials over the vocabulary (one read), the
row's loss, then softmax minus one-hot, times `scale` where the label counts, written over the
logits (one read, one write). torch.compile's version of the same chunk function made a
reduction pass and a separate scaling pass over a float32 copy; at Qwen3's 151,936-token
vocabulary that was ~20 ms of every 0.6B step on an H200 (benchmarks/results/SUMMARY.md).

The same arithmetic as `batching._ce_chunk`: float32 inside, the gradient stored in the logits'
dtype. `works()` checks the kernel once per process against that function before the trainer
uses it; Triton's interpreter (TRITON_INTERPRET=1) runs it on the CPU for the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable

try:
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001 - missing, or a build that cannot load on this machine
    triton = None

#: the largest block a program holds in registers (float32), as liger-kernel sizes its own
MAX_BLOCK = 32768

if triton is not None:

    @triton.jit
    def _ce_rows(  # type: ignore[no-untyped-def]  # Triton reads these annotations: tl.constexpr only
        logits_ptr,
        stride,
        labels_ptr,
        loss_ptr,
        scale,
        ignore_index,
        n_cols: tl.constexpr,
        WRITE_GRAD: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # the vocabulary is a compile-time constant: one model per process, and a loop bound
        # Triton's interpreter can run
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * stride
        y = tl.load(labels_ptr + row)
        valid = y != ignore_index
        m = float("-inf")
        s = 0.0
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m = m_new
        lse = m + tl.log(s)
        # a label outside the vocabulary is never read out of bounds: its row's loss is NaN
        inside = (y >= 0) & (y < n_cols)
        picked = tl.load(
            base + tl.where(valid & inside, y, 0), mask=valid & inside, other=float("nan")
        ).to(tl.float32)
        tl.store(loss_ptr + row, tl.where(valid, lse - picked, 0.0))
        if WRITE_GRAD:
            weight = tl.where(valid, scale, 0.0)
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < n_cols
                x = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
                p = tl.exp(x - lse)
                p = tl.where(cols == y, p - 1.0, p) * weight
                tl.store(base + cols, p.to(logits_ptr.dtype.element_ty), mask=mask)


def available() -> bool:
    """Whether Triton imported here."""
    return triton is not None


def ce_rows(
    logits: torch.Tensor,
    labels: torch.Tensor,
    scale: float,
    ignore_index: int,
    write_grad: bool = True,
) -> torch.Tensor:
    """Summed cross-entropy of `logits` (rows, vocab) against `labels` (rows,), rows labelled
    `ignore_index` counting nothing; with `write_grad`, `logits` is overwritten by the gradient
    of scale * that sum. A label outside the vocabulary makes the sum NaN (never a read out of
    bounds, never a quietly wrong loss; that row's gradient carries no label term)."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError("logits must be a (rows, vocab) tensor with contiguous rows")
    rows, vocab = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rows == 0:
        return loss.sum()
    block = min(MAX_BLOCK, triton.next_power_of_2(vocab))
    warps = 32 if block >= 16384 else (8 if block >= 2048 else 4)
    _ce_rows[(rows,)](
        logits,
        logits.stride(0),
        labels.contiguous(),
        loss,
        float(scale),
        ignore_index,
        n_cols=vocab,
        WRITE_GRAD=write_grad,
        BLOCK=block,
        num_warps=warps,
    )
    return loss.sum()


def chunk(
    h: torch.Tensor,
    w: torch.Tensor,
    y: torch.Tensor,
    scale: float,
    ignore_index: int,
    want_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(summed CE, its gradient for h) of one chunk, as `batching._ce_chunk` computes them;
    without `want_grad` (evaluation) the gradient pass and its matmul are skipped (None)."""
    logits = h @ w.t()
    loss = ce_rows(logits, y, scale, ignore_index, write_grad=want_grad)
    return loss, (logits @ w if want_grad else None)


def works(
    device: torch.device,
    dtype: torch.dtype,
    reference: Callable[..., Any],
    ignore_index: int,
    vocab: int = MAX_BLOCK + 1235,
) -> str | None:
    """None when the kernel gives `reference`'s loss and gradient on uneven random rows (some
    ignored) at the model's own `vocab` (the kernel is compiled per vocabulary, so the trial
    runs the very kernel training will) on `device`; else why not. The kernel and the
    reference see the same logits, so they agree far inside the tolerance."""
    try:
        gen = torch.Generator().manual_seed(7)
        h = (torch.randn(97, 64, generator=gen) * 2).to(device, dtype)
        w = torch.randn(vocab, 64, generator=gen).to(device, dtype)
        y = torch.randint(0, w.shape[0], (97,), generator=gen).to(device)
        y[::5] = ignore_index
        loss, grad = chunk(h, w, y, 0.25, ignore_index)
        assert grad is not None  # asked for (want_grad)
        loss_only, _ = chunk(h, w, y, 0.25, ignore_index, want_grad=False)
        ref_loss, ref_grad = reference(h, w, y, 0.25)
        err_loss = max(abs(float(x) - float(ref_loss)) for x in (loss, loss_only)) / max(
            1.0, abs(float(ref_loss))
        )
        err_grad = float(
            (grad.float() - ref_grad.float()).norm() / ref_grad.float().norm().clamp_min(1e-12)
        )
    except Exception as e:  # noqa: BLE001 - any failure means: do not use it here
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return f"{type(e).__name__}: {first}"
    # bf16: the two round the same float32 gradient (1e-5 apart measured on an H200); a
    # rounding that truncates instead (Triton's CPU interpreter) is 3e-3 off; a wrong row is >1e-1
    tol = 1e-5 if dtype == torch.float32 else 5e-3
    if not (err_loss <= tol and err_grad <= tol):
        return f"differs from the reference (loss {err_loss:.2e}, gradient {err_grad:.2e}, tolerance {tol:.0e})"
    return None
