"""ruff's C901 gate, shared by the house tests: mccabe's count over the paths given, `# noqa`
not honoured (a `# noqa: C901` does not make a function simpler)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def complexity(max_complexity: int, *paths: str | Path) -> subprocess.CompletedProcess[str]:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is part of the dev extra: pip install -e '.[dev]'")
    return subprocess.run(
        [
            ruff,
            "check",
            "--select",
            "C901",
            "--ignore-noqa",
            "--output-format",
            "concise",
            "--config",
            f"lint.mccabe.max-complexity = {max_complexity}",
            *map(str, paths),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
