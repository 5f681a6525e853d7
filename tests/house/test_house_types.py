"""mypy reads backend/ clean: no new error, and an error left for later is ignored by its code
(`# type: ignore[code]`) or listed in pyproject.toml's [tool.mypy] overrides.

The repository root is the `fleetdeck` package itself, so mypy is pointed at a parent folder
holding a link named `fleetdeck` to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_backend_type_checks(tmp_path):
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
        "-p",
        "fleetdeck.backend",
    ]
    try:
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    finally:
        link.unlink()  # no link into the repository is left behind in the temporary folders
    assert out.returncode == 0, f"mypy on fleetdeck.backend:\n{out.stdout}{out.stderr}"
