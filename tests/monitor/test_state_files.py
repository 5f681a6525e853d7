"""State and config files are files: one put where a file was that is a FIFO, a device or a
folder never hangs a command or the dashboard; it is refused with a warning naming it, and the
command goes on from defaults. Real FIFOs, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.acks import load_acks
from fleetdeck.backend.monitor import silences as sil


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,  # a read that blocked on a FIFO would hang here
        env=env or dict(os.environ),
    )


def test_a_fifo_or_a_folder_is_refused_unread(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        statedir.read_file(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        statedir.read_file(tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(OSError, match="past the 1000-byte limit"):
        statedir.read_file(big, 1000)
    assert statedir.read_file(big, 2000) == b"x" * 2000
    link = tmp_path / "link"
    link.symlink_to(big)
    assert statedir.read_file(link) == b"x" * 2000  # a link to a file is that file


def test_silences_and_acks_as_fifos_warn_and_go_on(tmp_path):
    os.mkfifo(sil.silences_path())
    silences, said = sil.load_silences()
    assert silences == [] and said and "not a regular file" in said[0]
    ack = statedir.state_dir() / "acknowledged.json"
    os.mkfifo(ack)
    acks = load_acks()  # returns at once: nothing stored is read from a FIFO
    assert not acks.stored and not acks.everywhere


def test_a_fleet_file_that_is_a_fifo_is_a_sentence_not_a_hang(tmp_path):
    fifo = tmp_path / "hosts.toml"
    os.mkfifo(fifo)
    out = _cli("--hosts", str(fifo), "status")
    assert out.returncode == 2 and "not a regular file" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_dashboards_settings_as_a_fifo_are_the_defaults_with_a_warning(tmp_path):
    from fleetdeck.tui.settings import load

    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    s = load(Path(fifo))
    assert s.problem and "not a regular file" in s.problem
