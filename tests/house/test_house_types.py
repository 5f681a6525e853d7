"""mypy reads the whole product (`backend`, `show`, `cli`, `tui`) with `check_untyped_defs`, so
the body of a function without annotations is checked too, and no error is new: each module's
count of errors is exactly its entry in `DEBT` (none: no entry).

`DEBT` only shrinks. A change that brings an error fails here; one that fixes errors fails
until the module's entry is lowered to what is left (and removed at zero), so the list says
what is still to clean, module by module. An error may also be ignored on its line by its code
(`# type: ignore[code]`, never bare) where it is a false alarm, saying why.

The same run has `disallow_untyped_defs`: every function in `backend` is to say its types. Its
`[no-untyped-def]` errors (a function missing an annotation) are not in `DEBT` but in `UNTYPED`,
a second list with the same rules: a new unannotated function in `backend` fails, an annotated
one fails until its module's entry is lowered. The host wing annotates as Python 3.8 reads it
(`typing.List`, `Optional`..., or `# type:` comments).

The repository root is the `fleetdeck` package itself, so mypy is pointed at a parent folder
holding a link named `fleetdeck` to it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("backend", "show", "cli", "tui")
ERROR = re.compile(
    r"^fleetdeck/(?P<path>[^:]+\.py):\d+: error: .*?(?:  \[(?P<code>[a-z-]+)\])?$", re.M
)
UNTYPED_CODE = "no-untyped-def"  # "Function is missing a (return) type annotation"

#: errors left for later, by module (`mypy --check-untyped-defs`): lower an entry when its
#: errors are fixed, never raise one
DEBT: dict[str, int] = {}


#: functions in `backend` without annotations, by module (`mypy --disallow-untyped-defs`, its
#: `[no-untyped-def]` errors): lower an entry when its functions are annotated, never raise one
UNTYPED: dict[str, int] = {}


def counts(output: str) -> Counter[str]:
    """Errors per module in mypy's output (paths relative to the repository), but for a
    function's missing annotations (`untyped`)."""
    return Counter(m["path"] for m in ERROR.finditer(output) if m["code"] != UNTYPED_CODE)


def untyped(output: str) -> Counter[str]:
    """Functions missing annotations per module of `backend` in mypy's output."""
    return Counter(
        m["path"]
        for m in ERROR.finditer(output)
        if m["code"] == UNTYPED_CODE and m["path"].startswith("backend/")
    )


def test_the_counting_reads_mypys_lines():
    out = (
        "fleetdeck/tui/app.py:64: error: Argument 1 has incompatible type  [arg-type]\n"
        "fleetdeck/tui/app.py:64: note: Consider using Sequence\n"
        'fleetdeck/backend/x.py:3: error: Name "y" is not defined  [name-defined]\n'
        "fleetdeck/tui/app.py:70: error: Missing return  [return]\n"
    )
    assert counts(out) == {"tui/app.py": 2, "backend/x.py": 1}


def test_the_untyped_counting_reads_only_backends_missing_annotations():
    out = (
        "fleetdeck/backend/a.py:3: error: Function is missing a return type annotation"
        "  [no-untyped-def]\n"
        'fleetdeck/backend/a.py:3: note: Use "-> None" if function does not return a value\n'
        "fleetdeck/backend/a.py:9: error: Function is missing a type annotation for one or more"
        " arguments  [no-untyped-def]\n"
        "fleetdeck/backend/a.py:12: error: Missing return  [return]\n"
        "fleetdeck/tui/app.py:5: error: Function is missing a type annotation  [no-untyped-def]\n"
    )
    assert untyped(out) == {"backend/a.py": 2}
    assert counts(out) == {"backend/a.py": 1}


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One mypy run over the product, read by both lists."""
    tmp = tmp_path_factory.mktemp("mypy")
    root = tmp / "root"
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
        str(tmp / "cache"),
        "--check-untyped-defs",
        "--disallow-untyped-defs",
        *(a for p in PACKAGES for a in ("-p", f"fleetdeck.{p}")),
    ]
    try:
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    finally:
        link.unlink()  # no link into the repository is left behind in the temporary folders
    text = out.stdout + out.stderr
    assert out.returncode in (0, 1) and "error: " not in text.replace(": error: ", ""), text[-3000:]
    return text


def only_shrinks(found: Counter[str], debt: dict[str, int], name: str, text: str) -> None:
    """`found` is exactly `debt`: a module over its entry fails as new, one under it as paid."""
    new = {m: n for m, n in found.items() if n > debt.get(m, 0)}
    assert not new, (
        f"new mypy errors (module: errors, {name}):\n"
        + "\n".join(f"{m}: {n}, {name} {debt.get(m, 0)}" for m, n in sorted(new.items()))
        + "\n"
        + "\n".join(line for line in text.splitlines() if any(m in line for m in new))
    )
    paid = {m: found.get(m, 0) for m, n in debt.items() if found.get(m, 0) < n}
    assert not paid, f"errors fixed: lower {name} to\n" + "\n".join(
        f'    "{m}": {n},' for m, n in sorted(paid.items())
    )


def test_the_product_type_checks_and_its_debt_only_shrinks(mypy_output: str) -> None:
    found = counts(mypy_output)
    only_shrinks(found, DEBT, "DEBT", mypy_output)
    assert sum(found.values()) == sum(DEBT.values()) <= 0


def test_backend_functions_say_their_types_and_the_untyped_only_shrink(mypy_output: str) -> None:
    found = untyped(mypy_output)
    only_shrinks(found, UNTYPED, "UNTYPED", mypy_output)
    assert sum(found.values()) == sum(UNTYPED.values()) <= 345
