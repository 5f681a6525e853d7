"""`become = "sudo"`: a login that is not root runs every helper through `sudo -n` (a real
throwaway user, a real sudoers file, a real sshd); a sudo that would ask for a password is
one clear error, never a prompt."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.poller import Poller

pytestmark = [pytest.mark.sshd, pytest.mark.root]

EUID = "import json, os, sys\nsys.stdout.write(json.dumps({'ok': True, 'euid': os.geteuid()}))\n"


@pytest.fixture
def plain_user():
    """A throwaway login with a shell and a home, removed with its sudoers file at the end."""
    if os.geteuid() != 0 or not all(map(shutil.which, ("useradd", "userdel", "sudo"))):
        pytest.fail("needs root, useradd and sudo (the README's test command installs them)")
    name = f"fdsu{uuid.uuid4().hex[:8]}"
    # password field "*": no password login, but not a locked account (sshd refuses those)
    subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/sh", "--password", "*", name], check=True
    )
    sudoers = Path(f"/etc/sudoers.d/{name}")
    try:
        yield name, sudoers
    finally:
        sudoers.unlink(missing_ok=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)


def _fleet(name: str):
    """A loopback sshd whose authorized keys the plain user can read (the shared test fleet's
    live under root's private tmp folder)."""
    from support.sshfleet import SshdFleet

    base = Path(tempfile.mkdtemp(prefix="fd-sudo-", dir="/tmp"))
    os.chmod(base, 0o755)
    fleet = SshdFleet(base)
    os.chmod(fleet.authorized_keys, 0o644)
    fleet.add("su")
    path = base / "hosts.toml"
    import getpass

    text = fleet.fleet_toml(per_host={"su": {"become": "sudo"}}, defaults={"python": "python3"})
    path.write_text(text.replace(f'user = "{getpass.getuser()}"', f'user = "{name}"'))
    return fleet, base, path


async def test_helpers_run_as_root_through_sudo_and_a_password_prompt_is_a_clear_error(plain_user):
    name, sudoers = plain_user
    fleet, base, path = _fleet(name)
    try:
        cfg = load_fleet(str(path))
        # no sudoers line: sudo -n would need a password, so it refuses at once
        async with Poller(cfg) as poller:
            snap = (await poller.poll()).hosts[0]
        assert not snap.reachable and snap.error_code == "sudo-password", (
            snap.error_code,
            snap.error,
        )
        assert "NOPASSWD" in snap.error and name in snap.error
        # with a NOPASSWD line the probe answers, and a helper runs as root though the login is not
        sudoers.write_text(f"{name} ALL=(root) NOPASSWD: ALL\n")
        os.chmod(sudoers, 0o440)
        async with Poller(cfg) as poller:
            snap = (await poller.poll()).hosts[0]
            assert snap.reachable, snap.error
            link = poller.link("su")
            ans = await link.run_helper(EUID, {})
            assert ans["euid"] == 0
            who = await link.run(["id", "-un"])
            assert who.stdout.decode().strip() == name  # a plain command is the login itself
    finally:
        fleet.stop_all()
        shutil.rmtree(base, ignore_errors=True)


def test_become_takes_only_sudo(tmp_path):
    from fleetdeck.backend.fleet.config import ConfigError, parse_fleet

    for bad in ('"doas"', "true", '"sudo -u x"'):
        with pytest.raises(ConfigError) as e:
            parse_fleet(f'[hosts.a]\naddress = "x"\nbecome = {bad}\n', "t.toml")
        assert "become" in str(e.value)
    assert (
        parse_fleet('[defaults]\nbecome = "sudo"\n[hosts.a]\naddress = "x"\n', "t").hosts[0].become
        == "sudo"
    )
