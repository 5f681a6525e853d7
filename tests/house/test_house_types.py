"""mypy reads the whole product (`backend`, `show`, `cli`, `tui`) with `check_untyped_defs`, so
the body of a function without annotations is checked too, and no error is new: each module's
count of errors is exactly its entry in `DEBT` (none: no entry).

`DEBT` only shrinks. A change that brings an error fails here; one that fixes errors fails
until the module's entry is lowered to what is left (and removed at zero), so the list says
what is still to clean, module by module. An error may also be ignored on its line by its code
(`# type: ignore[code]`, never bare) where it is a false alarm, saying why.

The repository root is the `fleetdeck` package itself, so mypy is pointed at a parent folder
holding a link named `fleetdeck` to it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("backend", "show", "cli", "tui")
ERROR = re.compile(r"^fleetdeck/(?P<path>[^:]+\.py):\d+: error: ", re.M)

#: errors left for later, by module (`mypy --check-untyped-defs`): lower an entry when its
#: errors are fixed, never raise one
DEBT: dict[str, int] = {}


def counts(output: str) -> Counter[str]:
    """Errors per module in mypy's output (paths relative to the repository)."""
    return Counter(m["path"] for m in ERROR.finditer(output))


def test_the_counting_reads_mypys_lines():
    out = (
        "fleetdeck/tui/app.py:64: error: Argument 1 has incompatible type  [arg-type]\n"
        "fleetdeck/tui/app.py:64: note: Consider using Sequence\n"
        'fleetdeck/backend/x.py:3: error: Name "y" is not defined  [name-defined]\n'
        "fleetdeck/tui/app.py:70: error: Missing return  [return]\n"
    )
    assert counts(out) == {"tui/app.py": 2, "backend/x.py": 1}


def test_the_product_type_checks_and_its_debt_only_shrinks(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    link = root / "fleetdeck"
    link.symlink_to(REPO, target_is_directory=True)
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--check-untyped-defs",
        *(a for p in PACKAGES for a in ("-p", f"fleetdeck.{p}")),
    ]
    try:
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    finally:
        link.unlink()  # no link into the repository is left behind in the temporary folders
    text = out.stdout + out.stderr
    found = counts(text)
    assert out.returncode in (0, 1) and "error: " not in text.replace(": error: ", ""), text[-3000:]
    new = {m: n for m, n in found.items() if n > DEBT.get(m, 0)}
    assert not new, (
        "new mypy errors (module: errors, debt):\n"
        + "\n".join(f"{m}: {n}, debt {DEBT.get(m, 0)}" for m, n in sorted(new.items()))
        + "\n"
        + "\n".join(line for line in text.splitlines() if any(m in line for m in new))
    )
    paid = {m: found.get(m, 0) for m, n in DEBT.items() if found.get(m, 0) < n}
    assert not paid, "errors fixed: lower DEBT to\n" + "\n".join(
        f'    "{m}": {n},' for m, n in sorted(paid.items())
    )
    assert sum(found.values()) == sum(DEBT.values()) <= 0
