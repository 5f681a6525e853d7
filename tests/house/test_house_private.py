"""House rule of every wing: a name that starts with `_` is its module's own. A module that
needs another's helper imports a public name (its module's `__all__` lists it) or the helper
moves to where both can reach it; `from x import _helper` says that a seam was cut without
being found.

The scan reads every product module's imports. The names still crossing are a debt list that
only shrinks: a new one fails, and so does an entry that no longer crosses (strike it)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("backend", "cli", "show", "tui")

#: module -> the private names it still imports from another module (to be made public or moved)
DEBT: dict[str, set[str]] = {}


def private_imports(source: str) -> set[str]:
    """The private names `source` imports from another module (`from m import _x`)."""
    return {
        a.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        for a in node.names
        if a.name.startswith("_") and not a.name.startswith("__")
    }


def found() -> dict[str, set[str]]:
    out = {}
    for top in PRODUCT:
        for p in sorted((REPO / top).rglob("*.py")):
            names = private_imports(p.read_text(encoding="utf-8"))
            if names:
                out[str(p.relative_to(REPO))] = names
    return out


def test_no_module_imports_another_modules_private_name():
    now = found()
    new = {m: sorted(n - DEBT.get(m, set())) for m, n in now.items() if n - DEBT.get(m, set())}
    assert not new, f"private names imported across modules (make them public, or move them): {new}"
    paid = {m: sorted(n - now.get(m, set())) for m, n in DEBT.items() if n - now.get(m, set())}
    assert not paid, f"no longer imported: strike them from DEBT: {paid}"


def test_the_scan_sees_a_private_import_and_nothing_else():
    assert private_imports("from a.b import _x, y, __version__\nfrom . import _z\n") == {"_x", "_z"}
    assert private_imports("import _thread\nfrom a import x as _x\n") == set()
