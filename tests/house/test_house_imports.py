"""House rule of every wing: an import inside a function says what it defers.

A function-local import either keeps something off a start-up path (torch, the dashboard's
textual, a module the host's payload need not load) or it defers nothing and hides the
dependency from a reader, and one that dodges a cycle is a cycle (tests/house/test_layering.py).
So each one carries a comment, on its own line or on the line before it, that starts
`# deferred:` and names what it defers: `# deferred: torch (seconds at start-up)`. A group of
imports next to each other shares one comment, which names at least one of them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARK = "deferred:"

# Deferred imports in files being reworked elsewhere, still without their comment: to be done
# there (comment each, or move it to the top where it defers nothing), then struck from this
# list. An entry that no longer matches an uncommented import fails too, so the list only shrinks.
TO_DO = {
    "backend/host/probe/main.py": {"psutil"},
    "backend/train/batching.py": {"sys"},
    "backend/train/bench.py": {
        "torch",
        ".session",
        "torch._inductor.config",
        "torch._functorch.config",
        ".reference",
        ".unsloth_reference",
        "contextlib",
        ".main",
        "traceback",
    },
    "backend/train/corpus.py": {"numpy", "collections"},
    "backend/train/fused.py": {"importlib"},
    "backend/train/loop.py": {"functools", "torch._dynamo"},
    "backend/train/lora.py": {".models", "peft"},
    "backend/train/main.py": {"torch", ".session", ".corpus", ".lora", "torch.distributed"},
    "backend/train/models.py": {"transformers"},
    "backend/train/session.py": {".models", ".rundir"},
    "tui/views/alerts.py": {"fleetdeck.tui.modals.silence"},
    "tui/modals/describe.py": {"fleetdeck.tui.views.seats_panel"},
    "tui/views/run_log.py": {"fleetdeck.backend.fleet.logs"},
    "tui/views/schedules.py": {"fleetdeck.tui.modals.describe", "fleetdeck.tui.modals.remove"},
}


@dataclass(frozen=True)
class Deferral:
    """A run of function-local import statements next to each other, and what is said of it."""

    path: str
    line: int
    modules: tuple[str, ...]
    names: tuple[str, ...]
    comment: str | None


def _comments(src: str) -> dict[int, str]:
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _said(comments: dict[int, str], first: int, last: int) -> str | None:
    for line in range(first - 1, last + 1):
        text = comments.get(line, "")
        if MARK in text:
            return text[text.index(MARK) + len(MARK) :].strip()
    return None


def deferrals(path: Path, rel: str) -> list[Deferral]:
    """Every run of imports inside a function body (at any depth) in the module at `path`."""
    src = path.read_text(encoding="utf-8")
    comments = _comments(src)
    out: list[Deferral] = []

    def runs(body: list[ast.stmt]) -> list[list[ast.Import | ast.ImportFrom]]:
        found: list[list[ast.Import | ast.ImportFrom]] = []
        prev: ast.stmt | None = None
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if found and found[-1][-1] is prev:
                    found[-1].append(stmt)
                else:
                    found.append([stmt])
            prev = stmt
        return found

    def module_names(run: list[ast.Import | ast.ImportFrom]) -> tuple[str, ...]:
        return tuple(
            m
            for s in run
            for m in (
                ["." * s.level + (s.module or "")]
                if isinstance(s, ast.ImportFrom)
                else [a.name for a in s.names]
            )
        )

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or not block or not isinstance(block[0], ast.AST):
                continue
            if in_function and isinstance(block[0], ast.stmt):
                for run in runs(block):
                    names = tuple((a.asname or a.name).split(".")[0] for s in run for a in s.names)
                    out.append(
                        Deferral(
                            rel,
                            run[0].lineno,
                            module_names(run),
                            names,
                            _said(comments, run[0].lineno, run[-1].end_lineno or run[-1].lineno),
                        )
                    )
            for child in block:
                visit(
                    child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                )

    visit(ast.parse(src), False)
    return out


def names_what_it_defers(d: Deferral) -> bool:
    """The comment names one of its imports: a part of a module's dotted name (`tui.app`,
    `torch`) or a name it imports (`FleetdeckApp`)."""
    if not d.comment:
        return False
    words = set(re.findall(r"[A-Za-z_][\w]*", d.comment))
    parts = {p for m in d.modules for p in m.split(".") if p and p != "fleetdeck"}
    return bool(words & (parts | set(d.names)))


def product_files() -> list[tuple[Path, str]]:
    """The modules of every wing pyproject installs (tests and benchmarks are not product)."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return [
        (p, p.relative_to(REPO).as_posix())
        for folder in sorted(cfg["package-dir"].values())
        for p in sorted((REPO / folder).rglob("*.py"))
    ]


def test_every_deferred_import_says_what_it_defers():
    unsaid, stale = [], []
    seen: dict[str, set[str]] = {}
    for path, rel in product_files():
        for d in deferrals(path, rel):
            if names_what_it_defers(d):
                continue
            todo = set(d.modules) & TO_DO.get(rel, set())
            if todo:
                seen.setdefault(rel, set()).update(todo)
                continue
            unsaid.append(
                f"{rel}:{d.line}: {', '.join(d.modules)}"
                + (f" (the comment names none of them: {d.comment!r})" if d.comment else "")
            )
    for rel, modules in TO_DO.items():
        for m in sorted(modules - seen.get(rel, set())):
            stale.append(f"{rel}: {m} (done: strike it from TO_DO)")
    assert not unsaid, (
        "an import inside a function needs `# deferred: WHAT (why)` on its line or the "
        "one before, or a place at the top of its module:\n" + "\n".join(unsaid)
    )
    assert not stale, "\n".join(stale)


def test_the_rule_catches_an_unsaid_deferral(tmp_path: Path):
    (tmp_path / "m.py").write_text(
        "import json\n\n\n"
        "def said():\n    # deferred: torch (seconds at start-up)\n    import torch\n    return torch\n\n\n"
        "def trailing():\n    from fleetdeck.tui.app import run  # deferred: tui.app and textual\n    return run\n\n\n"
        "def grouped():\n    # deferred: numpy (only the report counts tokens)\n    import numpy\n"
        "    from collections import Counter\n    return numpy, Counter\n\n\n"
        "def unsaid():\n    import torch\n    return torch\n\n\n"
        "def vague():\n    # deferred: for speed\n    from fleetdeck.backend.fleet.poller import Poller\n    return Poller\n\n\n"
        "def nested():\n    if True:\n        try:\n            import ctypes\n        except ImportError:\n"
        "            return None\n    return ctypes\n\n\n"
        "def not_a_comment():\n    s = '# deferred: torch'\n    import torch\n    return s, torch\n"
    )
    found = {d.line: names_what_it_defers(d) for d in deferrals(tmp_path / "m.py", "m.py")}
    assert found == {6: True, 11: True, 17: True, 23: False, 29: False, 36: False, 44: False}, found
