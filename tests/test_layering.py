"""The backend is headless and the dashboard never loads the training stack (checked in a
fresh interpreter, since this test process may already have imported anything)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def loaded_after(stmt: str) -> set[str]:
    code = f"import sys\n{stmt}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_backend_loads_no_ui():
    mods = loaded_after("import fleetdeck.backend, fleetdeck.backend.poller, fleetdeck.backend.config, "
                        "fleetdeck.backend.ssh, fleetdeck.backend.models, fleetdeck.backend.state")
    assert not {m for m in mods if m.split(".")[0] in ("textual", "rich")}
    assert not {m for m in mods if m.startswith("fleetdeck.tui")}


def test_dashboard_and_cli_load_no_torch():
    mods = loaded_after("import fleetdeck.tui, fleetdeck.tui.cli; fleetdeck.tui.cli.build_parser()")
    assert not {m for m in mods if m.split(".")[0] in ("torch", "transformers", "peft")}


def test_probe_is_stdlib_only():
    src = (REPO / "backend" / "probe.py").read_text()
    code = ("import sys, builtins\nreal = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    top = name.split('.')[0]\n"
            "    if top in ('fleetdeck', 'asyncssh', 'rich', 'textual', 'torch'):\n"
            "        raise ImportError('probe imported ' + name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            f"exec(compile({src!r}, 'probe', 'exec'), {{'__name__': 'probe'}})\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports")
    if lint is None:
        pytest.fail("import-linter is part of the dev extra: pip install -e '.[dev]'")
    p = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_command_is_registered():
    from fleetdeck.tui import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(cli.COMMANDS) <= set(sub.choices)


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is part of the dev extra: pip install -e '.[dev]'")
    p = subprocess.run([ruff, "check", "."], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
