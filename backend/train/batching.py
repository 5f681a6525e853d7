"""From rows to tensors, the step schedule, and a cross-entropy that never holds all logits.

A micro-batch is one flat sequence (batch dimension 1): its ranges end to end, position ids
restarting at every range, `cu_seqlens` marking range starts, and labels already shifted (the
last token of a range predicts nothing, so no label crosses a document boundary).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import ce_kernel
from .corpus import Split

IGNORE = -100
#: how the cross-entropy chunks run (RUN.toml's `cross_entropy`): "auto" is, on CUDA, the Triton
#: kernel that writes the gradient over the logits (ce_kernel.py) where it imports and passes its
#: check, else the torch.compile'd chunk function, else eager; "compiled" skips the kernel;
#: "eager" runs the chunk eagerly in place (the CPU's way, and the parity check's plain path)
CE_MODES = ("auto", "compiled", "eager")


@dataclass
class Batch:
    """One micro-batch, ready for the model."""

    input_ids: torch.Tensor  # (1, T) int64
    position_ids: torch.Tensor  # (1, T) int64
    labels: torch.Tensor  # (1, T) int64, IGNORE where nothing is predicted
    cu_seqlens: torch.Tensor  # (ranges + 1,) int32
    max_len: int
    tokens: int  # tokens fed
    targets: int  # labels that count
    #: sum of n^2 over the ranges (documents or document pieces): causal attention's work
    attn_sq: int = 0
    #: (B, T) 1/0 for padded batches (one range per row, right-padded); None for packed ones
    attention_mask: torch.Tensor | None = None

    def model_kwargs(self) -> dict:
        """Keyword arguments for a transformers decoder (varlen attention reads the cu_seq_lens;
        a padded batch gives its attention mask instead)."""
        if self.attention_mask is not None:
            return dict(
                input_ids=self.input_ids,
                position_ids=self.position_ids,
                attention_mask=self.attention_mask,
            )
        return dict(
            input_ids=self.input_ids,
            position_ids=self.position_ids,
            cu_seq_lens_q=self.cu_seqlens,
            cu_seq_lens_k=self.cu_seqlens,
            max_length_q=self.max_len,
            max_length_k=self.max_len,
        )


def make_batch(
    split: Split,
    rows: list[list[tuple[int, int]]],
    device: torch.device,
    max_len: int,
    padded: bool = False,
    pad_to: int | None = None,
) -> Batch:
    """Flatten `rows` into one packed sequence on `device`; with `padded`, one row per batch
    entry instead (each row one range, right-padded to the longest), for models whose recurrent
    layers would carry state from one range into the next in a flat sequence.

    `pad_to`: a packed batch shorter than this many tokens (the corpus's last, partial row; an
    eval micro-batch of fewer rows) gets filler ranges of at most `max_len` tokens up to it, with
    nothing to predict, so compiled layers see one sequence length and never recompile for a new
    one in the middle of training (on an H200 such a recompile stalled a 0.3 s step for 17 s).
    The filler is neither counted as tokens nor in the attention work."""
    if padded:
        return _padded_batch(split, rows, device, max_len)
    flat = torch.frombuffer(split.tokens, dtype=torch.int32)
    ids, pos, lab, cu = [], [], [], [0]
    for row in rows:
        for s, e in row:
            piece = flat[s:e].long()
            ids.append(piece)
            pos.append(torch.arange(e - s))
            lab.append(torch.cat([piece[1:], torch.tensor([IGNORE])]))
            cu.append(cu[-1] + e - s)
    real = cu[-1]
    real_lengths = [b - a for a, b in zip(cu[:-1], cu[1:], strict=False)]
    while pad_to is not None and cu[-1] < pad_to:
        n = min(max_len, pad_to - cu[-1])
        ids.append(torch.zeros(n, dtype=torch.long))
        pos.append(torch.arange(n))
        lab.append(torch.full((n,), IGNORE, dtype=torch.long))
        cu.append(cu[-1] + n)
    input_ids = torch.cat(ids)
    labels = torch.cat(lab)
    targets = int((labels != IGNORE).sum())
    pin = device.type == "cuda"

    def put(t: torch.Tensor) -> torch.Tensor:
        return (t.pin_memory() if pin else t).to(device, non_blocking=pin)

    cu_t = put(torch.tensor(cu, dtype=torch.int32))
    # the number of ranges changes from batch to batch: compiled layers take it as a dynamic size
    # from the first batch, instead of recompiling when a later batch first differs (a recompile
    # of a timed step, or of a step deep into training, stalls it)
    torch._dynamo.maybe_mark_dynamic(cu_t, 0)
    return Batch(
        put(input_ids[None]),
        put(torch.cat(pos)[None]),
        put(labels[None]),
        cu_t,
        max_len,
        real,
        targets,
        attn_sq=sum(n * n for n in real_lengths),
    )


def _padded_batch(
    split: Split, rows: list[list[tuple[int, int]]], device: torch.device, max_len: int
) -> Batch:
    flat = torch.frombuffer(split.tokens, dtype=torch.int32)
    ranges = []
    for row in rows:
        if len(row) != 1:
            raise ValueError("a padded batch takes rows of one range each (packing off)")
        ranges.append(row[0])
    width = max(e - s for s, e in ranges)
    ids = torch.zeros(len(ranges), width, dtype=torch.long)
    lab = torch.full((len(ranges), width), IGNORE, dtype=torch.long)
    mask = torch.zeros(len(ranges), width, dtype=torch.long)
    for i, (s, e) in enumerate(ranges):
        piece = flat[s:e].long()
        ids[i, : e - s] = piece
        lab[i, : e - s - 1] = piece[1:]
        mask[i, : e - s] = 1
    pos = torch.arange(width).expand(len(ranges), width).contiguous()
    lengths = [e - s for s, e in ranges]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    pin = device.type == "cuda"

    def put(t: torch.Tensor) -> torch.Tensor:
        return (t.pin_memory() if pin else t).to(device, non_blocking=pin)

    return Batch(
        put(ids),
        put(pos),
        put(lab),
        put(cu),
        max_len,
        sum(lengths),
        int((lab != IGNORE).sum()),
        attn_sq=sum(n * n for n in lengths),
        attention_mask=put(mask),
    )


class StepSchedule:
    """Which rows each optimizer step takes: epochs of `seed`-shuffled rows, end to end, so a
    resumed run sees exactly the rows it would have seen."""

    def __init__(self, n_rows: int, rows_per_step: int, world: int, seed: int):
        self.n, self.per_rank, self.world, self.seed = n_rows, rows_per_step, world, seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            order = list(range(self.n))
            random.Random(self.seed * 1000003 + epoch).shuffle(order)
            self._perms = {epoch: order}
        return self._perms[epoch]

    def rows(self, step: int, rank: int) -> list[int]:
        """Row indices for optimizer step `step` (0-based) on process `rank`."""
        per_step = self.per_rank * self.world
        first = step * per_step + rank * self.per_rank
        return [self._perm(i // self.n)[i % self.n] for i in range(first, first + self.per_rank)]

    def epoch_at(self, step: int) -> float:
        """Epochs completed after `step` steps."""
        return step * self.per_rank * self.world / self.n


#: one chunk's (summed CE, its gradient for h); the kernel's also takes `want_grad=`
ChunkFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _ce_chunk(
    h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed CE, its gradient for h) of one chunk; written functionally for torch.compile,
    which fuses the softmax, the one-hot subtraction and the cast into few passes."""
    logits = (h @ w.t()).float()
    lse = torch.logsumexp(logits, dim=-1)
    valid = y != IGNORE
    yc = y.clamp_min(0)
    picked = logits.gather(1, yc[:, None]).squeeze(1)
    loss = ((lse - picked) * valid).sum()
    probs = torch.exp(logits - lse[:, None])
    probs = probs.scatter_add(1, yc[:, None], -valid[:, None].to(probs.dtype))
    grad = (probs * (valid[:, None].to(probs.dtype) * scale)).to(h.dtype) @ w
    return loss, grad


def _ce_chunk_inplace(
    h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same in place, eagerly: one float32 logits buffer per chunk."""
    logits = (h @ w.t()).float()
    lse = torch.logsumexp(logits, dim=-1)
    valid = y != IGNORE
    yc = y.clamp_min(0)
    loss = ((lse - logits.gather(1, yc[:, None]).squeeze(1)) * valid).sum()
    probs = logits.sub_(lse[:, None]).exp_()
    probs.scatter_add_(1, yc[:, None], -valid[:, None].float())
    probs.mul_(valid[:, None].float() * scale)
    return loss, probs.to(h.dtype) @ w


_COMPILED: dict[str, Any] = {}  # "fn": the compiled ChunkFn; else a kernel's verdict, a flag
#: where a fallback from a compiled kernel is reported (the engine points it at the run's log)
FALLBACK_LOG: dict[str, object] = {"log": None}


def report_fallback(what: str, error: BaseException, instead: str = "running it eagerly") -> None:
    """Say once per kernel why a compiled kernel was given up (never silently)."""
    key = f"reported:{what}"
    if _COMPILED.get(key):
        return
    _COMPILED[key] = True
    first = (str(error).strip().splitlines() or [""])[0][:200]
    line = f"{what} failed here ({type(error).__name__}: {first}); {instead}"
    log = FALLBACK_LOG.get("log")
    if callable(log):
        log(line)
    else:
        import sys

        print(line, file=sys.stderr)


def _chunk_fn(device: torch.device, vocab: int, dtype: torch.dtype, mode: str = "auto") -> ChunkFn:
    """The chunk function for this device and `mode` (CE_MODES): with "auto", the Triton kernel
    where it imports and passed its trial at this vocabulary and dtype, else the compiled chunk
    function, else eager."""
    if device.type != "cuda" or mode == "eager":
        return _ce_chunk_inplace
    if mode == "auto" and ce_kernel.available():
        key = _kernel_key(device, vocab, dtype)
        if key not in _COMPILED:
            why = ce_kernel.works(device, dtype, _ce_chunk_inplace, IGNORE, vocab)
            if why:
                return _give_up(_ce_chunk_kernel, RuntimeError(why), device, vocab, dtype, mode)
            _COMPILED[key] = None
        if _COMPILED[key] is None:
            return _ce_chunk_kernel
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(_ce_chunk, dynamic=None)
    return _COMPILED["fn"]


def _kernel_key(device: torch.device, vocab: int, dtype: torch.dtype) -> str:
    return f"kernel:{device}:{vocab}:{dtype}"


def _give_up(
    fn: ChunkFn,
    error: BaseException,
    device: torch.device,
    vocab: int,
    dtype: torch.dtype,
    mode: str = "auto",
) -> ChunkFn:
    """After `fn` failed (the kernel its trial, or any of them on a chunk): remember not to use
    it again, say so once, and return what runs instead (the compiled chunk function after the
    kernel, eager after that)."""
    if fn is _ce_chunk_kernel:
        _COMPILED[_kernel_key(device, vocab, dtype)] = str(error) or type(error).__name__
        nxt = _chunk_fn(device, vocab, dtype, mode)
        report_fallback(
            "the Triton cross-entropy kernel",
            error,
            "running the chunks eagerly"
            if nxt is _ce_chunk_inplace
            else "using the compiled chunk function",
        )
        return nxt
    report_fallback("the compiled cross-entropy chunk", error)
    _COMPILED["fn"] = _ce_chunk_inplace
    return _ce_chunk_inplace


def ce_kind(device: torch.device, vocab: int, dtype: torch.dtype, mode: str = "auto") -> str:
    """How the cross-entropy runs on `device` in `mode` (for the recipe line)."""
    fn = _chunk_fn(device, vocab, dtype, mode)
    return (
        "Triton kernel"
        if fn is _ce_chunk_kernel
        else "eager"
        if fn is _ce_chunk_inplace
        else "compiled"
    )


def _ce_chunk_kernel(
    h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, scale: float, want_grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same through ce_kernel: one pass for the row's log-sum-exp, one writing the gradient
    over the logits (skipped, with its matmul, when no gradient is wanted)."""
    return ce_kernel.chunk(h, w, y, scale, IGNORE, want_grad)


class LinearCrossEntropy(torch.autograd.Function):
    """sum(CE(hidden @ weight.T, labels)) * scale, chunk by chunk; the gradient for `hidden` is
    computed in the forward pass, so neither logits nor their gradient outlive one chunk (the
    151,936-token vocabulary makes a 4k row's logits 1.2 GB in bf16). `weight` is frozen."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        scale: float,
        chunk: int,
        mode: str = "auto",
    ) -> torch.Tensor:
        want_grad = hidden.requires_grad
        grad = torch.empty_like(hidden) if want_grad else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        vocab = weight.shape[0]
        fn = _chunk_fn(hidden.device, vocab, hidden.dtype, mode)
        for s in range(0, hidden.shape[0], chunk):
            h, y = hidden[s : s + chunk], labels[s : s + chunk]
            while True:
                try:
                    if fn is _ce_chunk_kernel and not want_grad:
                        loss, g = fn(h, weight, y, scale, want_grad=False)
                    else:
                        loss, g = fn(h, weight, y, scale)
                    break
                except Exception as e:  # noqa: BLE001 - a compiler failure must not stop training
                    if fn is _ce_chunk_inplace or "OutOfMemory" in type(e).__name__:
                        raise
                    fn = _give_up(fn, e, hidden.device, vocab, hidden.dtype, mode)
            total += loss
            if grad is not None:
                grad[s : s + chunk] = g
        ctx.save_for_backward(grad if want_grad else torch.empty(0))
        return total * scale

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad,) = ctx.saved_tensors
        return grad * grad_out.to(grad.dtype), None, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    scale: float,
    chunk: int = 8192,
    mode: str = "auto",
) -> torch.Tensor:
    """Scaled summed cross-entropy of a (T, H) hidden state against the output head, its chunks
    run as `mode` says (CE_MODES)."""
    return LinearCrossEntropy.apply(hidden, weight.detach(), labels, scale, chunk, mode)


__all__ = [
    "Batch",
    "CE_MODES",
    "FALLBACK_LOG",
    "ce_kind",
    "IGNORE",
    "LinearCrossEntropy",
    "StepSchedule",
    "linear_cross_entropy",
    "make_batch",
    "report_fallback",
]
