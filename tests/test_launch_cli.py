"""The CLI (launch included) is headless: building the parser and running a command load no
textual, and the backend never names the dashboard's package, not even as a string."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parent.parent / "backend"


def test_the_cli_never_loads_textual():
    code = ("import sys\nfrom fleetdeck.tui.cli import build_parser, main\nbuild_parser()\n"
            "try:\n    main(['launch', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_the_backend_never_names_the_dashboard_package():
    named = [f"{f.relative_to(BACKEND)}:{n}" for f in sorted(BACKEND.rglob("*.py"))
             for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"fleetdeck[./]tui", line)]
    assert named == []
