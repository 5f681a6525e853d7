"""Run folders with checkpoints, and purge driven through its plan, the CLI and the prompt."""

from __future__ import annotations

import hashlib
import io
import os
import pty
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.purge.main import execute_purge, gather_purge
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.cli.main import main

from support.weights import safetensors


def make_run(base: Path, name: str, steps=(25, 50), adapter: bool = True) -> Path:
    """A run folder as `fleetdeck train` lays it out, with random bytes in every file."""
    run = base / name
    for s in steps:
        c = run / "checkpoints" / f"checkpoint-{s}"
        c.mkdir(parents=True)
        (c / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(2048)))
        (c / "adapter_config.json").write_text('{"r": 32}')
        (c / "optimizer.pt").write_bytes(os.urandom(8192))
    if adapter:
        a = run / "adapter"
        a.mkdir()
        (a / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(4096)))
        (a / "adapter_config.json").write_text('{"r": 32}')
    return run


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


HOST = "h1"


def uniq(prefix: str = "run") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def cli(capsys, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    """Run `fleetdeck ARGV` in-process with a non-terminal stdin; (rc, stdout, stderr)."""
    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        rc = main(list(argv))
    finally:
        sys.stdin = old
    out = capsys.readouterr()
    return rc, out.out, out.err


def purge_audit() -> list[dict]:
    return [r for r in audit.read_audit() if r["action"] == "purge"]


def _prompted_purge(fleet: Path, path: str, typed: bytes, *extra: str) -> tuple[int, str]:
    """Run the real CLI with its stdin on a pseudo-terminal and type `typed` into it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetdeck.cli.main",
            "--hosts",
            str(fleet),
            "purge",
            HOST,
            path,
            *extra,
        ],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    os.write(master, typed)
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    return proc.returncode, out.decode()


@pytest.fixture
def fleet(tmp_path):
    """(fleet file with host `local`, its runs root)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    f = tmp_path / "hosts.toml"
    f.write_text(f'[hosts.local]\nlocal = true\nruns = ["{runs}"]\npython = "{sys.executable}"\n')
    return f, runs


def local_host(tmp_path: Path):
    """The `local` fixture's value, for other test modules."""
    runs = tmp_path / "runs"
    runs.mkdir()
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(
        f'[hosts.local]\nlocal = true\nruns = ["{runs}"]\npython = "{sys.executable}"\n'
    )
    return load_fleet(str(fleet)).host("local"), runs


async def plan_for(host_cfg, paths):
    link = HostLink(host_cfg)
    try:
        return await gather_purge(link, [str(p) for p in paths])
    finally:
        await link.close()


async def purge(host_cfg, plan):
    link = HostLink(host_cfg)
    try:
        return await execute_purge(link, plan, {p.path: p.path for p in plan.paths}, via="test")
    finally:
        await link.close()


def ckpt(run: Path, step: int = 25) -> Path:
    return run / "checkpoints" / f"checkpoint-{step}"
