"""The rows the references feed the Trainer, and what each step really fed: padded rows (one
document piece per row), dense `seq_len`-token rows cut from the token stream, and document
pieces for transformers' `DataCollatorWithFlattening`; `fed_lengths` reads back the real length
of each attended piece of a micro-batch (never padding)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Callable

    from .corpus import Split


class PaddedRows(torch.utils.data.Dataset):
    """One document piece per row, padded to seq_len (`pad_to_longest` leaves that to collate)."""

    def __init__(self, split: Split, seq_len: int, pad_id: int) -> None:
        self.split, self.seq_len, self.pad_id = split, seq_len, pad_id
        self.flat = torch.frombuffer(split.tokens, dtype=torch.int32)

    def __len__(self) -> int:
        return len(self.split.rows)

    def __getitem__(self, i: int) -> dict:
        ((s, e),) = self.split.rows[i]
        ids = torch.full((self.seq_len,), self.pad_id, dtype=torch.long)
        ids[: e - s] = self.flat[s:e].long()
        mask = torch.zeros(self.seq_len, dtype=torch.long)
        mask[: e - s] = 1
        labels = ids.clone()
        labels[mask == 0] = -100
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class FullRows(torch.utils.data.Dataset):
    """The packed rows that hold exactly `seq_len` tokens, over the split's token stream."""

    def __init__(self, split: Split, seq_len: int) -> None:
        self.flat = torch.frombuffer(split.tokens, dtype=torch.int32)
        self.rows = [r for r in split.rows if sum(e - s for s, e in r) == seq_len]

    def __len__(self) -> int:
        return len(self.rows)


class DenseRows(FullRows):
    """Full `seq_len`-token rows cut from the packed token stream: no padding, no mask, attention
    runs across the whole row (documents separated only by their end-of-text tokens)."""

    def __getitem__(self, i: int) -> dict:
        ids = torch.cat([self.flat[s:e] for s, e in self.rows[i]]).long()
        return {"input_ids": ids, "labels": ids.clone()}


class DocumentRows(FullRows):
    """The packed rows' document pieces, for `DataCollatorWithFlattening`: a micro-batch of b
    rows is flattened into one sequence of their pieces (b x seq_len tokens, as fleetdeck's)."""

    def __getitem__(self, i: int) -> dict:
        return {"pieces": [self.flat[s:e].tolist() for s, e in self.rows[i]]}


def flattening_collator() -> Callable[[list[dict]], dict]:
    # deferred: transformers (seconds at start-up)
    from transformers import DataCollatorWithFlattening

    inner = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)

    def collate(items: list[dict]) -> dict:
        return inner([{"input_ids": p} for x in items for p in x["pieces"]])

    return collate


def collate_to_longest(items: list[dict]) -> dict:
    width = max(int(x["attention_mask"].sum()) for x in items)
    return {k: torch.stack([x[k][:width] for x in items]) for k in items[0]}


def fed_lengths(inputs: dict) -> list[int]:
    """The real length of each attended piece of one micro-batch as the Trainer feeds it: an
    attention mask's rows, a flattened batch's documents, or full dense rows."""
    if "attention_mask" in inputs and inputs["attention_mask"] is not None:
        return [int(n) for n in inputs["attention_mask"].sum(dim=1).tolist()]
    cu = inputs.get("cu_seq_lens_q")
    if cu is not None:
        cu = [int(c) for c in (cu.tolist() if hasattr(cu, "tolist") else cu)]
        return [b - a for a, b in zip(cu, cu[1:], strict=False)]
    ids = inputs["input_ids"]
    return [int(ids.shape[1])] * int(ids.shape[0])
