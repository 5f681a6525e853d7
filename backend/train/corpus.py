"""Corpus loading, the byte-level tokenizer, the held-out split and packing (no torch).

Documents come from JSON lines (a `text` string per line) or plain text files (one document per
file; a folder of files is many documents). Each document becomes its tokens plus EOS. Packing
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
                    raise CorpusError(f"corpus {f} line {n}: expected an object with a \"text\" string")
                if obj["text"]:
                    docs.append(obj["text"])
        else:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                line = raw[: e.start].count(b"\n") + 1
                raise CorpusError(f"corpus {f} line {line}: not valid UTF-8 text") from None
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
    for d in docs:
        ids = tok.encode(d)
        start = len(flat)
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


def build_splits(docs: list[str], tok: Tokenizer, seq_len: int, packing: bool, eval_fraction: float,
                 seed: int) -> tuple[Split, Split | None]:
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
                raise CorpusError("corpus: too small to hold out an eval split (set eval_fraction = 0)")
            bounds, eval_bounds = [(s, cut)], [(cut, e)]
    train = Split(flat, pack(bounds, seq_len, packing))
    if not train.rows:
        raise CorpusError("corpus: no training rows (documents too short)")
    held = Split(flat, pack(eval_bounds, seq_len, packing)) if eval_bounds else None
    return train, held


__all__ = ["ByteTokenizer", "CorpusError", "Split", "Tokenizer", "build_splits", "pack", "read_documents"]
