"""Every package of the product opens with a docstring that says what it holds and what it may
import (harlequin's and Textual's habit): a reader learns a folder's job and its place in the
layers from its `__init__.py`, not from reading every module in it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("backend", "cli", "show", "tui")


def _packages() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (REPO / top).rglob("__init__.py"))


def test_there_are_packages_to_check():
    assert len(_packages()) >= 15


def test_every_package_says_what_it_holds_and_may_import():
    bare = []
    for init in _packages():
        doc = ast.get_docstring(ast.parse(init.read_text()))
        rel = init.relative_to(REPO)
        if not doc or len(doc.split()) < 8:
            bare.append(f"{rel}: no docstring saying what the package holds")
        elif (
            "import" not in doc.lower()
            and "stdlib" not in doc.lower()
            and "standard library" not in doc.lower()
        ):
            bare.append(f"{rel}: the docstring does not say what the package may import")
    assert not bare, "\n".join(bare)
