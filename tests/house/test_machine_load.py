"""FLEETDECK_TEST_LOAD=N starts N busy processes beside a pytest session and kills them at the
end; a value that is not a whole number from 0 to 64 is a usage error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

PROBE = """
import os
def test_hogs_run(machine_load):
    assert len(machine_load) == int(os.environ["FLEETDECK_TEST_LOAD"])
    for pid in machine_load:
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().split(") ")[1][0] in "RSD"   # alive (running or runnable)
    with open(os.environ["PIDS_OUT"], "w") as f:
        f.write(" ".join(map(str, machine_load)))
"""


def run_session(tmp_path: Path, load: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe_load.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    shutil.copytree(
        TESTS / "support", tmp_path / "support", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = dict(os.environ, FLEETDECK_TEST_LOAD=load, PIDS_OUT=str(tmp_path / "pids"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def test_the_hogs_run_for_the_session_and_are_gone_after(tmp_path):
    r = run_session(tmp_path, "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "machine load: 2 busy process(es)" in r.stdout
    pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_bad_load_value_is_a_usage_error(tmp_path):
    r = run_session(tmp_path, "lots")
    assert (
        r.returncode == 4 and "FLEETDECK_TEST_LOAD must be a whole number from 0 to 64" in r.stderr
    )
