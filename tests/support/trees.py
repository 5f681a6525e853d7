"""Folder trees with hostile names, made and read back byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

# names an operator's shell or a naive script would trip over
HOSTILE = [
    "sp ace",
    'it\'s "quoted"',
    "-rf",
    "$(touch pwned)",
    "new\nline",
    "tab\there",
    "caf\udce9",
]  # a latin-1 byte that is not UTF-8, kept by surrogateescape


def make_tree(root: Path, big: int = 300_000) -> dict[str, bytes]:
    """A small adapter-like folder with hostile names; {relative path: content}."""
    files = {
        "adapter_model.safetensors": os.urandom(big),
        "adapter_config.json": b'{"r": 32}\n',
        "empty": b"",
    }
    for i, name in enumerate(HOSTILE):
        files[f"odd/{name}"] = f"content {i}\n".encode()
    files["deep/a/b/c.txt"] = b"deep\n"
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "empty-dir").mkdir()
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            out[str(p.relative_to(root))] = p.read_bytes()
    return out
