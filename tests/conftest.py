"""Shared fixtures: an isolated state/config dir per test and a real loopback sshd fleet."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sshfleet import SshdFleet, have_sshd  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_state(tmp_path_factory, monkeypatch):
    """Every test gets its own XDG state and config dirs and no FLEETDECK_HOSTS."""
    base = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    monkeypatch.delenv("FLEETDECK_HOSTS", raising=False)
    return base


@pytest.fixture(scope="session")
def sshd_fleet(tmp_path_factory):
    """Three real sshd hosts (h1, h2, h3) on loopback, trusted in the fleet's known_hosts."""
    if not have_sshd():
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    fleet = SshdFleet(tmp_path_factory.mktemp("fleet"))
    for name in ("h1", "h2", "h3"):
        fleet.add(name)
    yield fleet
    fleet.stop_all()


@pytest.fixture
def spare_fleet(tmp_path):
    """A fleet of its own for tests that kill hosts or swap keys."""
    if not have_sshd():
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    fleet = SshdFleet(tmp_path / "fleet")
    yield fleet
    fleet.stop_all()


@pytest.fixture
def fleet_file(sshd_fleet, tmp_path):
    """A fleet file for h1..h3 of the shared sshd fleet."""
    return sshd_fleet.write_fleet(tmp_path / "hosts.toml")


@pytest.fixture
async def links(fleet_file):
    """Links to h1 and h2 of the shared sshd fleet, closed at the end."""
    from fleetdeck.backend.config import load_fleet
    from fleetdeck.backend.ssh import HostLink

    fleet = load_fleet(str(fleet_file))
    made = {n: HostLink(fleet.host(n)) for n in ("h1", "h2")}
    yield made
    for link in made.values():
        await link.close()


def pytest_configure(config):
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
