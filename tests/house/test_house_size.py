"""House rules of the whole product (backend/, cli/, show/, tui/): no module over 400 lines and
no function past complexity 25 (ruff's C901, mccabe's count, `# noqa` not honoured). A module
that grows past the bound is split along its seams, as the host wing's families were.

The modules and functions already past the bounds when the rule came in are listed below with
their size that day: the list is a debt, and it only shrinks. A listed module may not grow, a
module split under the bound must leave the list, and nothing new may join it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support.ruff_gate import complexity

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("backend", "cli", "show", "tui")
MAX_LINES = 400
MAX_COMPLEXITY = 25

# path -> its line count when the rule came in: each may shrink, none may grow
OVER_LINES: dict[str, int] = {}
# function -> its complexity when the rule came in
OVER_COMPLEXITY: dict[str, int] = {}


def _modules() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (REPO / top).rglob("*.py"))


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_there_are_modules_to_measure():
    assert len(_modules()) >= 150


def _too_long(paths: list[Path], known: dict[str, int]) -> list[str]:
    """Modules past the bound and not in `known`, or grown past what `known` records."""
    bad = []
    for p in paths:
        name, n = _name(p), _lines(p)
        if n > known.get(name, MAX_LINES):
            bad.append(f"{name}: {n} lines (allowed {known.get(name, MAX_LINES)})")
    return bad


def _name(p: Path) -> str:
    try:
        return p.relative_to(REPO).as_posix()
    except ValueError:
        return p.name


def test_no_product_module_is_over_400_lines_or_grows_its_debt():
    long = _too_long(_modules(), OVER_LINES)
    assert not long, "\n".join(long)


def test_the_debt_list_only_names_modules_still_over_the_bound():
    stale = [f for f in OVER_LINES if not (REPO / f).exists() or _lines(REPO / f) <= MAX_LINES]
    assert not stale, f"split under {MAX_LINES} lines: take them off OVER_LINES: {stale}"


def _complexity(*paths: str | Path) -> subprocess.CompletedProcess[str]:
    return complexity(MAX_COMPLEXITY, *paths)


_C901 = re.compile(r"C901 `(?P<name>[^`]+)` is too complex \((?P<n>\d+) > \d+\)")


def _too_complex(output: str, known: dict[str, int]) -> list[str]:
    """ruff's C901 findings not in `known`, or more complex than `known` records."""
    bad = []
    for line in output.splitlines():
        m = _C901.search(line)
        if m and int(m["n"]) > known.get(m["name"], MAX_COMPLEXITY):
            bad.append(line)
    return bad


def test_no_product_function_is_over_complexity_25_or_grows_its_debt():
    p = _complexity(*PRODUCT)
    assert p.returncode in (0, 1) and not p.stderr.strip(), p.stdout + p.stderr
    bad = _too_complex(p.stdout, OVER_COMPLEXITY)
    assert not bad, "\n".join(bad)
    found = {m["name"] for m in map(_C901.search, p.stdout.splitlines()) if m}
    stale = sorted(set(OVER_COMPLEXITY) - found)
    assert not stale, f"now within {MAX_COMPLEXITY}: take them off OVER_COMPLEXITY: {stale}"


def test_the_gates_catch_a_long_module_and_a_branchy_function(tmp_path: Path):
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY))
    branchy = tmp_path / "branchy.py"
    branchy.write_text(f"def branchy(x):\n{body}    return -1\n")
    p = _complexity(branchy)
    assert p.returncode != 0 and "C901" in p.stdout and "branchy" in p.stdout, p.stdout + p.stderr
    assert _too_complex(p.stdout, {}) and not _too_complex(
        p.stdout, {"branchy": MAX_COMPLEXITY + 1}
    )
    long, short = tmp_path / "long.py", tmp_path / "short.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    short.write_text("x = 1\n" * MAX_LINES)
    assert _too_long([long, short, branchy], {}) == [
        f"long.py: {MAX_LINES + 1} lines (allowed {MAX_LINES})"
    ]
    assert _too_long([long], {"long.py": MAX_LINES + 1}) == []
    assert _too_long([long], {"long.py": MAX_LINES}) != []
