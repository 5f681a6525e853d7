"""The CLI (launch included) is headless: building the parser and running a command load no
textual, and the backend never names the dashboard's package, not even as a string."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[2] / "backend"


def test_the_cli_never_loads_textual():
    code = (
        "import sys\nfrom fleetdeck.cli.main import build_parser, main\nbuild_parser()\n"
        "try:\n    main(['launch', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_the_backend_never_names_the_dashboard_package():
    named = [
        f"{f.relative_to(BACKEND)}:{n}"
        for f in sorted(BACKEND.rglob("*.py"))
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"fleetdeck[./]tui", line)
    ]
    assert named == []


def test_the_bundled_launch_helper_answers_under_python_3_8(tmp_path):
    """What runs on a host is the bundle (helper, estimates, host library) on its Python 3.8."""
    import glob
    import json
    import os
    import shutil

    import pytest

    from fleetdeck.backend.actions.launch.main import helper_source

    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python")))
    py38 = found[0] if found else shutil.which("python3.8")  # a pyenv shim may not run it
    if py38 is None:
        pytest.skip("no Python 3.8 on this machine (pyenv install 3.8)")
    req = {
        "op": "preflight",
        "config": {
            "base_model": "random:tiny",
            "corpus": str(tmp_path / "none"),
            "output": str(tmp_path / "out"),
            "gpus": 1,
            "seq_len": 32,
            "batch_size": 1,
            "grad_accum": 1,
            "max_steps": 3,
            "save_steps": 2,
            "lora_rank": 8,
        },
        "runs": [str(tmp_path)],
        "live": [{"path": "/elsewhere/hf-run", "pid": None}],
    }
    # a file, as a host's payload cache keeps it: the bundle is past the kernel's 128 KiB
    # bound on one argument, so `-c SOURCE` cannot carry it
    helper = tmp_path / "launch_helper.py"
    helper.write_text(helper_source())
    p = subprocess.run(
        [py38, str(helper)],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["ok"] is True and doc["passed"] is False
    assert checks["corpus"]["message"] == f"corpus {tmp_path / 'none'} does not exist on this host"
    assert "/elsewhere/hf-run (pid unknown)" in checks["live-run"]["message"]
    bad = subprocess.run(
        [py38, str(helper)],
        input=json.dumps({"op": "nope"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(bad.stdout)["error"]["code"] == "bad-request"
