"""A fresh install is quiet: the commands a script reads write nothing to stderr on success, and
`--json` parses with stderr merged into stdout.

asyncssh 2.24 under cryptography 51 printed ten `CryptographyDeprecationWarning` lines on every
command. The CI runs this in a brand-new virtual environment with whatever versions pip picks
today, which is where a user meets it first. The filter that quiets it is narrow: the same warning
raised from anywhere but asyncssh still shows, and no module but `sshlib` imports asyncssh (so no
import can run before the filter is in place).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import local_fleet

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["COLUMNS"] = "80"
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        **kw,
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], ["status", "--json"], ["runs", "--json"]],
    ids=["help", "status-json", "runs-json"],
)
def test_a_command_writes_nothing_to_stderr_on_success(tmp_path, args):
    fleet = local_fleet(tmp_path)
    argv = args if args == ["--help"] else ["--hosts", fleet, *args]
    out = _run(argv)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
    if "--json" in args:
        json.loads(out.stdout)


def test_json_parses_with_stderr_merged(tmp_path):
    fleet = local_fleet(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    out = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", fleet, "status", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stdout
    assert isinstance(json.loads(out.stdout), dict)


def test_the_filter_is_narrow_the_same_warning_from_elsewhere_still_shows():
    code = (
        "import warnings\n"
        "import fleetdeck.backend.fleet.link.sshlib\n"
        "from cryptography.utils import CryptographyDeprecationWarning as W\n"
        "warnings.warn('DSA is deprecated and support will be removed', W)\n"
        "warnings.warn('something else', UserWarning)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "DSA is deprecated" in out.stderr and "something else" in out.stderr, out.stderr


def test_only_sshlib_imports_asyncssh():
    """Any other module importing asyncssh could run before the filter and print the warnings."""
    bad = []
    for folder in ("backend", "cli", "show", "tui"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "sshlib.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                if any(n == "asyncssh" or n.startswith("asyncssh.") for n in names):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "import asyncssh through fleetdeck.backend.fleet.link.sshlib: " + ", ".join(bad)
