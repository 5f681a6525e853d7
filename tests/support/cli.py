"""Run the CLI in this process, over a fleet file of one local host."""

from __future__ import annotations

import sys
from pathlib import Path


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run `fleetdeck ARGV` in this process; (exit status, stdout, stderr)."""
    from fleetdeck.cli.main import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def local_fleet(tmp_path: Path, extra: str = "") -> str:
    (tmp_path / "runs").mkdir(exist_ok=True)
    f = tmp_path / "hosts.toml"
    f.write_text(
        f'[defaults]\npython = "{sys.executable}"\ncommand_timeout = 30\nconnect_timeout = 2\n'
        f'[hosts.local]\nlocal = true\nruns = ["{tmp_path}/runs"]\n{extra}'
    )
    return str(f)
