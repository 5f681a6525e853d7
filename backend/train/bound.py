"""The physical bound of a run: the tokens/s the card's measured rates allow for this model.

`fleetdeck bench` measures two rates on the card before the run (bound_rates.py): the bf16
matmul rate on the model's own GEMM shapes (each frozen Linear's forward product and its input
gradient, at the run's tokens per forward pass; q/k/v and gate/up as one product each where the
trainer fuses them) and the attention kernel's forward + backward rate at the run's sequence
length. The bound is the trainer's own FLOP count run at those rates, nothing else costing time:

    time of a step = tokens * (4*N_matmul + 6*N_lora) / matmul rate
                     + 6*attention_layers*heads*head_dim*sum(n^2) / attention rate

(frozen weights take a forward and an input-gradient product, no weight gradient; the adapters
all three, counted at the base products' rate, which flatters them: their rank-r products run far
slower). A run's fraction of the bound is the bound's time for the steps it timed, with the
document lengths they really fed, over the time they took. Standard library only: the
arithmetic is tested on the CPU.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

#: Linears that read one input and run as one product when the trainer fuses projections
FUSED_GROUPS: tuple[tuple[str, ...], ...] = (
    ("q_proj", "k_proj", "v_proj"),
    ("gate_proj", "up_proj"),
)


@dataclass(frozen=True)
class Gemm:
    """One frozen product shape: `count` products of (rows x n_in) by (n_in x n_out) a forward pass."""

    n_in: int
    n_out: int
    count: int

    @property
    def params(self) -> int:
        """Weights this shape holds over all its products."""
        return self.n_in * self.n_out * self.count


def gemm_shapes(linears: list[tuple[str, int, int]], fused: bool) -> list[Gemm]:
    """The distinct product shapes of a model's frozen Linears, given as (path, in, out): with
    `fused`, the members of a FUSED_GROUPS group under one parent (same input) become one product
    of their summed outputs. Sorted by weight count, largest first."""
    shapes: Counter[tuple[int, int]] = Counter()
    groups: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for path, n_in, n_out in linears:
        parent, _, leaf = path.rpartition(".")
        gi = next((i for i, g in enumerate(FUSED_GROUPS) if leaf in g), None)
        if fused and gi is not None:
            groups.setdefault((parent, gi), []).append((n_in, n_out))
        else:
            shapes[(n_in, n_out)] += 1
    for members in groups.values():
        ins = {i for i, _ in members}
        if len(ins) == 1:
            shapes[(members[0][0], sum(o for _, o in members))] += 1
        else:  # inputs of different widths cannot share a product
            for m in members:
                shapes[m] += 1
    out = [Gemm(i, o, n) for (i, o), n in shapes.items()]
    return sorted(out, key=lambda g: (-g.params, g.n_in, g.n_out))


def lora_params(linears: list[tuple[str, int, int]], targets: list[str], rank: int) -> int:
    """The adapters' weights for LoRA of `rank` on the Linears (path, in, out) whose last path
    component is in `targets`: rank * (in + out) each (A is rank x in, B is out x rank)."""
    return sum(rank * (i + o) for path, i, o in linears if path.rpartition(".")[2] in targets)


def matmul_rate(
    shapes: list[Gemm], seconds: dict[tuple[int, int], float], rows: dict[tuple[int, int], int]
) -> float:
    """The bf16 rate (FLOP/s) of a forward pass's frozen products with their input gradients.
    `seconds[(n_in, n_out)]` is one forward product plus one input-gradient product of that shape
    timed on `rows[(n_in, n_out)]` rows (4 * rows * n_in * n_out FLOPs). Each shape is weighed by
    its share of a token's work (`count` products of it), whatever row count it was timed at: the
    FLOPs of one token over the time one token takes."""
    per_row_flops = sum(4.0 * g.n_in * g.n_out * g.count for g in shapes)
    per_row_time = sum(
        seconds[(g.n_in, g.n_out)] / rows[(g.n_in, g.n_out)] * g.count for g in shapes
    )
    if per_row_time <= 0:
        raise ValueError("the measured products took no time")
    return per_row_flops / per_row_time


def attention_flops(heads: int, head_dim: int, lengths: list[int]) -> float:
    """The trainer's FLOPs of causal attention forward and backward over documents of `lengths`
    in one layer: 6 * heads * head_dim * sum(n^2)."""
    return 6.0 * heads * head_dim * sum(n * n for n in lengths)


@dataclass(frozen=True)
class Rates:
    """The two rates the bound runs at, FLOP/s in the trainer's count."""

    matmul: float
    attention: float


def rates_of(measured: dict) -> Rates:
    """The Rates a measurement (bound_rates.measure: TFLOP/s) stands for."""
    return Rates(measured["matmul_tflops"] * 1e12, measured["attention_tflops"] * 1e12)


def step_seconds(tokens: int, attn_sq: int, per_token: float, per_sq: float, rates: Rates) -> float:
    """The bound's time for one step: `tokens` real tokens, `attn_sq` the sum of its document
    pieces' squared lengths, the trainer's FLOP terms (`per_token` = 4*N_matmul + 6*N_lora,
    `per_sq` = 6*attention_layers*heads*head_dim)."""
    return tokens * per_token / rates.matmul + attn_sq * per_sq / rates.attention


def bound_tokens_per_second(
    tokens: list[int], attn_sq: list[int], per_token: float, per_sq: float, rates: Rates
) -> float:
    """The tokens/s the rates allow for these steps (their tokens and document lengths)."""
    total = sum(
        step_seconds(t, sq, per_token, per_sq, rates) for t, sq in zip(tokens, attn_sq, strict=True)
    )
    return sum(tokens) / total


def full_rows_tokens_per_second(
    seq_len: int, per_token: float, per_sq: float, rates: Rates
) -> float:
    """The tokens/s the rates allow when every token sits in a `seq_len`-long document (a row
    holds one document: the attention term at its largest)."""
    return 1.0 / step_seconds(1, seq_len, per_token, per_sq, rates)


def fraction(
    tokens: list[int],
    attn_sq: list[int],
    times: list[float],
    per_token: float,
    per_sq: float,
    rates: Rates,
) -> dict:
    """The bound for timed steps and the run's fraction of it (tokens/s over the bound's)."""
    bound = bound_tokens_per_second(tokens, attn_sq, per_token, per_sq, rates)
    achieved = sum(tokens) / sum(times)
    return {
        "bound_tokens_per_second": round(bound, 1),
        "fraction_of_bound": round(achieved / bound, 4),
    }


__all__ = [
    "FUSED_GROUPS",
    "Gemm",
    "Rates",
    "attention_flops",
    "bound_tokens_per_second",
    "fraction",
    "full_rows_tokens_per_second",
    "gemm_shapes",
    "lora_params",
    "matmul_rate",
    "rates_of",
    "step_seconds",
]
