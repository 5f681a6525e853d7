"""Corpus loading, the byte-level tokenizer, the held-out split and packing (no torch).

Documents come from JSON lines (a `text` string per line) or plain text files (one document per
file; a folder of files is many documents). Each document becomes its tokens plus EOS (after BOS
when the tokenizer's template starts every text with it, as Llama's and Gemma's do). Packing
fills `seq_len` rows with pieces of documents; a row is a list of (start, end) ranges into one
flat token array, and each range is attended and labelled on its own: position ids restart at
every range, and no label ever points into the next range.
"""

from __future__ import annotations

import json
import random
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class CorpusError(Exception):
    """The corpus cannot be used; the message names the file and, for JSON lines, the line."""


class Tokenizer(Protocol):
    """What the trainer needs from a tokenizer."""

    eos_id: int
    pad_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """Bytes 0-255 are tokens 0-255; 256 is end of text, 257 padding. Nothing to download."""

    eos_id = 256
    pad_id = 257
    vocab_size = 258

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of `text`."""
        return list(text.encode("utf-8"))

    def token_text(self, token: int) -> str:
        """What one token stands for ("" for end of text and padding)."""
        return chr(token) if token < 256 else ""


TEXT_SUFFIXES = {".jsonl", ".json", ".txt", ".md", ".text"}


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if files:
            return files
        raise CorpusError(f"corpus {path}: no .jsonl or text files in it")
    raise CorpusError(f"corpus {path} does not exist")


def read_documents(path: Path) -> list[str]:
    """Every document of the corpus, in file order; CorpusError names file and line."""
    docs: list[str] = []
    for f in _files(path):
        try:
            raw = f.read_bytes()
        except OSError as e:
            raise CorpusError(f"corpus {f}: cannot read it ({e.strerror})") from None
        if f.suffix in (".jsonl", ".json"):
            for n, line in enumerate(raw.split(b"\n"), start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except (ValueError, UnicodeDecodeError) as e:
                    raise CorpusError(f"corpus {f} line {n}: not valid JSON ({e})") from None
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    raise CorpusError(
                        f'corpus {f} line {n}: expected an object with a "text" string'
                    )
                if obj["text"]:
                    docs.append(obj["text"])
        else:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                lineno = raw[: e.start].count(b"\n") + 1
                raise CorpusError(f"corpus {f} line {lineno}: not valid UTF-8 text") from None
            if text.strip():
                docs.append(text)
    if not docs:
        raise CorpusError(f"corpus {path}: no documents in it")
    return docs


@dataclass
class Split:
    """One split of the corpus: a flat token array and rows of ranges into it."""

    tokens: array
    rows: list[list[tuple[int, int]]]

    @property
    def real_tokens(self) -> int:
        """Tokens in all rows (no padding is ever stored)."""
        return sum(e - s for row in self.rows for s, e in row)


def _encode_all(docs: list[str], tok: Tokenizer) -> tuple[array, list[tuple[int, int]]]:
    flat = array("i")
    bounds = []
    bos = getattr(tok, "bos_id", None)
    for d in docs:
        ids = tok.encode(d)
        start = len(flat)
        if bos is not None:
            flat.append(bos)
        flat.extend(ids)
        flat.append(tok.eos_id)
        bounds.append((start, len(flat)))
    return flat, bounds


def pack(bounds: list[tuple[int, int]], seq_len: int, packing: bool) -> list[list[tuple[int, int]]]:
    """Rows of at most `seq_len` tokens. With packing, documents fill rows end to end (a document
    that does not fit continues in the next row as a new range); without, every row holds one
    piece of one document. Ranges of one token are dropped: they have nothing to predict."""
    rows: list[list[tuple[int, int]]] = []
    row: list[tuple[int, int]] = []
    used = 0
    for start, end in bounds:
        pos = start
        while pos < end:
            room = seq_len - used if packing else seq_len
            piece = min(room, end - pos)
            if piece >= 2:
                row.append((pos, pos + piece))
                used += piece
            pos += piece
            if not packing or used >= seq_len:
                if row:
                    rows.append(row)
                row, used = [], 0
    if row:
        rows.append(row)
    return rows


def build_splits(
    docs: list[str], tok: Tokenizer, seq_len: int, packing: bool, eval_fraction: float, seed: int
) -> tuple[Split, Split | None]:
    """(train, eval): documents shuffled by `seed`, `eval_fraction` of them held out (at least
    one when the fraction is above 0; a lone document gives up its tail instead)."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    docs = [docs[i] for i in order]
    flat, bounds = _encode_all(docs, tok)
    eval_bounds: list[tuple[int, int]] = []
    if eval_fraction > 0:
        if len(bounds) >= 2:
            n_eval = min(len(bounds) - 1, max(1, round(len(bounds) * eval_fraction)))
            eval_bounds, bounds = bounds[:n_eval], bounds[n_eval:]
        else:
            s, e = bounds[0]
            cut = e - max(2, int((e - s) * eval_fraction))
            if cut - s < 2:
                raise CorpusError(
                    "corpus: too small to hold out an eval split (set eval_fraction = 0)"
                )
            bounds, eval_bounds = [(s, cut)], [(cut, e)]
    train = Split(flat, pack(bounds, seq_len, packing))
    if not train.rows:
        raise CorpusError("corpus: no training rows (documents too short)")
    held = Split(flat, pack(eval_bounds, seq_len, packing)) if eval_bounds else None
    return train, held


#: a corpus looks hard-wrapped when at least this share of its in-paragraph lines end near one width
HARD_WRAP_SHARE = 0.6


def hard_wrap(docs: list[str]) -> dict | None:
    """{"width", "share", "lines"} when most lines inside paragraphs (a non-empty line followed by
    another) end near one width, as text wrapped at ~70 characters does; None otherwise. Text
    reflowed into one line per paragraph has no such lines, or lines of every length."""
    lengths: list[int] = []
    for d in docs:
        lines = [line.rstrip() for line in d.split("\n")]
        lengths.extend(
            len(a) for a, b in zip(lines, lines[1:], strict=False) if a.strip() and b.strip()
        )
    if len(lengths) < 20:
        return None
    lengths.sort()
    width = lengths[int(0.9 * (len(lengths) - 1))]
    near = max(8, round(0.15 * width))
    share = sum(1 for n in lengths if width - near <= n <= width + 2) / len(lengths)
    if width > 200 or share < HARD_WRAP_SHARE:
        return None
    return {"width": width, "share": round(share, 4), "lines": len(lengths)}


def _token_counts(tokens: array) -> dict[int, int]:
    try:
        import numpy as np

        counts = np.bincount(np.frombuffer(tokens, dtype=np.int32))
        return {int(i): int(c) for i in np.nonzero(counts)[0] for c in (counts[i],)}
    except ImportError:
        from collections import Counter

        return dict(Counter(tokens))


def corpus_facts(docs: list[str], tokens: array, tok: Tokenizer, sha256: str | None) -> dict:
    """What the operator checks before spending a budget on a corpus: documents, tokens (end-of-
    text markers not counted), its sha256, the share of tokens that are only line breaks and
    whitespace, and whether the text looks hard-wrapped (the adapter would learn the wrapping)."""
    counts = _token_counts(tokens)
    eos = counts.pop(tok.eos_id, 0)
    total = sum(counts.values())
    text_of = getattr(tok, "token_text", None)
    newline = 0
    if text_of is not None:
        for t, c in counts.items():
            txt = text_of(t)
            if "\n" in txt and not txt.strip():
                newline += c
    wrap = hard_wrap(docs)
    warnings = []
    if wrap:
        warnings.append(
            f"the corpus looks hard-wrapped: {100 * wrap['share']:.0f}% of {wrap['lines']} lines "
            f"inside paragraphs end near {wrap['width']} characters, and "
            f"{100 * newline / max(1, total):.1f}% of tokens are line breaks; the adapter will "
            "learn the wrapping (reflow paragraphs onto one line each to train on the text alone)"
        )
    return {
        "documents": len(docs),
        "tokens": total,
        "end_of_text_tokens": eos,
        "sha256": sha256,
        "newline_tokens": newline if text_of is not None else None,
        "newline_token_share": round(newline / max(1, total), 5) if text_of is not None else None,
        "hard_wrap": wrap,
        "warnings": warnings,
    }


def describe_facts(facts: dict) -> str:
    """One log line of corpus facts."""
    share = facts["newline_token_share"]
    sha = facts["sha256"] or "unknown"
    return (
        f"corpus facts: {facts['documents']:,} documents, {facts['tokens']:,} tokens, sha256 {sha}, "
        + (
            f"newline tokens {facts['newline_tokens']:,} ({100 * share:.2f}%)"
            if share is not None
            else "newline tokens unknown (the tokenizer cannot say what its tokens stand for)"
        )
        + (
            f", hard-wrapped near {facts['hard_wrap']['width']} characters"
            if facts["hard_wrap"]
            else ""
        )
    )


__all__ = [
    "ByteTokenizer",
    "CorpusError",
    "Split",
    "Tokenizer",
    "build_splits",
    "corpus_facts",
    "describe_facts",
    "hard_wrap",
    "pack",
    "read_documents",
]
