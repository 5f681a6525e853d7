"""House rule of the suite itself: tests live by area and share only through tests/support/.

- No test module imports another (`from test_purge import make_run`): what two test files
  share is a helper in `tests/support/` (imported as `support.*`) or a fixture in a conftest.
- Nothing but `conftest.py` sits at the root of `tests/`: each test file is in its area's
  folder (`tests/purge/`, `tests/tui/`, ...), each helper in `tests/support/`.
- No two test files share a name: the area folders are no packages, so pytest imports each test
  module by its basename, and a second file of the same name could not be imported beside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
AT_THE_ROOT = {"conftest.py"}


def is_test_module(name: str) -> bool:
    """A dotted module name whose last part is a test module (`test_purge`, `x.test_purge`)."""
    return name.split(".")[-1].startswith("test_")


def suite_faults(tests: Path) -> list[str]:
    """Every breach of the three rules under `tests`, one line each (empty: none)."""
    faults = []
    for p in sorted(tests.iterdir()):
        if p.is_file() and p.name not in AT_THE_ROOT:
            faults.append(f"{p.name}: a file at the root of tests/ (only conftest.py sits there)")
    seen: dict[str, Path] = {}
    for p in sorted(tests.rglob("test_*.py")):
        rel = p.relative_to(tests)
        if p.name in seen:
            faults.append(f"{rel}: the same name as {seen[p.name]}")
        else:
            seen[p.name] = rel
    for p in sorted(tests.rglob("*.py")):
        rel = p.relative_to(tests)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), filename=str(p))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                # `from test_x import a`, and `from . import test_x` / `from support import test_x`
                names = [node.module or ""] + [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name and is_test_module(name):
                    faults.append(f"{rel}:{node.lineno}: imports the test module {name}")
    return faults


def test_the_suite_keeps_its_layout():
    faults = suite_faults(TESTS)
    assert not faults, "\n".join(faults)


def test_the_check_catches_each_breach(tmp_path: Path):
    tests = tmp_path / "tests"
    for folder in ("support", "purge", "tui"):
        (tests / folder).mkdir(parents=True)
    (tests / "conftest.py").write_text("import pytest\n")
    (tests / "support" / "runs.py").write_text("def make_run():\n    pass\n")
    (tests / "purge" / "test_purge.py").write_text("from support.runs import make_run\n")
    assert suite_faults(tests) == [], "a tree that keeps the rules passes"

    (tests / "helpers.py").write_text("X = 1\n")
    (tests / "tui" / "test_purge.py").write_text("def test_a():\n    pass\n")
    (tests / "tui" / "test_modals.py").write_text(
        "from test_purge import make_run\n\n\ndef test_b():\n    import support.test_tui\n"
    )
    assert suite_faults(tests) == [
        "helpers.py: a file at the root of tests/ (only conftest.py sits there)",
        "tui/test_purge.py: the same name as purge/test_purge.py",
        "tui/test_modals.py:1: imports the test module test_purge",
        "tui/test_modals.py:5: imports the test module support.test_tui",
    ]
