"""Every benchmark script answers --help on a machine without a GPU: it says what it needs and
does not crash on import. A script that needs CUDA, Triton or the train extra checks for them
after its arguments are parsed, and refuses with one sentence (exit 2) where they are missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))
#: the GPU checks: each names what it needs in its help, and refuses without a GPU
GPU_CHECKS = ("check_ce.py", "check_lora_in_base.py", "check_varlen.py")
# no GPU, whatever machine the suite runs on
NO_GPU = dict(os.environ, CUDA_VISIBLE_DEVICES="")


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=REPO,
        env=NO_GPU,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_scripts_are_found():
    names = {p.name for p in SCRIPTS}
    assert len(SCRIPTS) > 10 and set(GPU_CHECKS) <= names, sorted(names)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_works_without_a_gpu(script: Path):
    p = _run(script, "--help")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert p.stdout.startswith("usage:"), p.stdout[:500]
    assert "Traceback" not in p.stderr, p.stderr[-4000:]


@pytest.mark.parametrize("name", GPU_CHECKS)
def test_a_gpu_check_says_what_it_needs_and_refuses_without_it(name: str):
    script = REPO / "benchmarks" / name
    assert "Needs a CUDA GPU" in _run(script, "--help").stdout
    p = _run(script)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-4000:]
    assert "Traceback" not in p.stderr and p.stderr.startswith(f"{name}: "), p.stderr[-4000:]
    assert "needs a CUDA GPU" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
