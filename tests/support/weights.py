"""Weights files that are whole by their bytes (`backend/host/lib/weights.py`), written with the
standard library only: a safetensors file holding one U8 tensor of the given payload, and a
`pytorch_model.bin` zip archive. And the ways a save goes wrong: torn, sparse, an index that
names no weights."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path


def safetensors(payload: bytes, name: str = "w") -> bytes:
    """A whole safetensors file whose one tensor (dtype U8) holds `payload`."""
    header = {name: {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + payload


def random_safetensors(n: int) -> bytes:
    return safetensors(os.urandom(n))


def torch_zip(payload: bytes) -> bytes:
    """A whole zip archive shaped like torch.save's (`archive/data.pkl`, `archive/data/0`)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", payload)
    return buf.getvalue()


def write_torn(path: Path, keep: int) -> int:
    """A whole file cut at `keep` bytes, as a save killed while writing in place leaves it;
    returns the whole size."""
    whole = random_safetensors(1 << 16)
    path.write_bytes(whole[:keep])
    return len(whole)


def write_sparse(path: Path, size: int = 1 << 30) -> None:
    """A header that promises `size` bytes of data, and a file sized to match with nothing
    written after the header: a preallocated save that never finished."""
    n = size
    header = {"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + n)
