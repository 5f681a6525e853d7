"""Shared fixtures: an isolated state/config dir per test and a real loopback sshd fleet."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from support.busy import hogs
from support.sshfleet import SshdFleet, have_sshd

# fixtures that live beside their helpers, for every area: root_crontab, h1, fleet
pytest_plugins = ["support.crontab", "support.launch", "support.purge"]


@pytest.fixture(autouse=True)
def isolated_state(tmp_path_factory, monkeypatch):
    """Every test gets its own XDG state and config dirs, no FLEETDECK_HOSTS and no proxy."""
    base = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    monkeypatch.delenv("FLEETDECK_HOSTS", raising=False)
    # the monitor's HTTP client takes proxies from the environment: the suite's loopback peers
    # are reached direct, whatever proxy the machine running it names
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
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
    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.backend.fleet.link.ssh import HostLink

    fleet = load_fleet(str(fleet_file))
    made = {n: HostLink(fleet.host(n)) for n in ("h1", "h2")}
    yield made
    for link in made.values():
        await link.close()


CRON_SPOOL = Path("/var/spool/cron/crontabs")
CRONTAB_BIN = shutil.which("crontab")  # resolved once: a test may put a fake one first on PATH
# another user's crontab: its line numbers overlap those of every crontab the tests install
BYSTANDER_TAB = (
    b"# fleetdeck tests: a bystander's crontab, never to be touched\n"
    b'MAILTO=""\n'
    + b"".join(b"%d 3 * * * /usr/bin/true fleetdeck-bystander-%d\n" % (n, n) for n in range(1, 11))
)


class Bystander:
    """A throwaway user with a crontab of its own, as a shared machine has: schedule tests must
    pass beside it and leave its crontab as they found it (`check()`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.spool = CRON_SPOOL / name
        self.seen = self.witness()

    def witness(self) -> tuple[bytes, int, int] | None:
        """The spool file's bytes, inode and mtime: a rewrite changes at least one of them."""
        try:
            st = self.spool.stat()
            return self.spool.read_bytes(), st.st_ino, st.st_mtime_ns
        except FileNotFoundError:
            return None

    def check(self) -> None:
        assert self.witness() == self.seen, f"the crontab of another user ({self.name}) was changed"


@pytest.fixture(scope="session")
def bystander(tmp_path_factory):
    """Another user (throwaway, `fdby...`) with a ten-line crontab, for the whole session; None
    where this machine cannot have one (not root, no useradd, no Debian cron spool). Removed at
    the end, crontab and user, also when tests failed."""
    if (
        os.geteuid() != 0
        or not CRON_SPOOL.is_dir()
        or not CRONTAB_BIN
        or not all(map(shutil.which, ("useradd", "userdel")))
    ):
        yield None
        return
    name = f"fdby{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True
    )
    try:
        tab = tmp_path_factory.mktemp("bystander") / "crontab"
        tab.write_bytes(BYSTANDER_TAB)
        subprocess.run([CRONTAB_BIN, "-u", name, str(tab)], check=True)
        yield Bystander(name)
    finally:
        subprocess.run([CRONTAB_BIN, "-u", name, "-r"], capture_output=True)
        subprocess.run(["userdel", name], capture_output=True)


def pytest_configure(config):
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    _load_from_env()  # a bad FLEETDECK_TEST_LOAD stops the session before any test


def _load_from_env() -> int:
    """FLEETDECK_TEST_LOAD=N: how many busy processes run beside the whole session (0: none)."""
    raw = os.environ.get("FLEETDECK_TEST_LOAD", "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or not 0 <= int(raw) <= 64:
        raise pytest.UsageError(
            f"FLEETDECK_TEST_LOAD must be a whole number from 0 to 64, not {raw!r}"
        )
    return int(raw)


@pytest.fixture(scope="session", autouse=True)
def machine_load():
    """Under FLEETDECK_TEST_LOAD=N, N CPU hogs (`busy.hogs`) run for the whole session (the suite
    must pass on a busy machine); they are killed at the end, also when the session fails.
    Yields their pids."""
    n = _load_from_env()
    if not n:
        yield []
        return
    with hogs(n) as pids:
        yield pids


def pytest_report_header(config):
    n = _load_from_env()
    return (
        f"machine load: {n} busy process(es) beside the session (FLEETDECK_TEST_LOAD)"
        if n
        else None
    )


@pytest.fixture
def children():
    """Processes a test starts (`support.probe.sleeper` appends to it); killed at the end."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
