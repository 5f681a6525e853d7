"""What a link says when it cannot do its job, against real sshd hosts: refused logins, missing
key files, refused connections, chatty login shells, failing helpers, a fresh controller."""

from __future__ import annotations

import getpass
import os
import shutil
import stat

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink

from support.sshfleet import keygen

pytestmark = pytest.mark.sshd


async def test_link_is_an_async_context_manager_that_closes(sshd_fleet, fleet_file):
    async with HostLink(load_fleet(str(fleet_file)).host("h1")) as link:
        assert (await link.run(["true"])).returncode == 0
        conn = await link.connection()
        assert link.state == "up"
    assert conn.is_closed()
    assert link.state == "idle"


async def test_refused_login_is_its_own_state_and_is_not_retried_until_the_key_changes(
    spare_fleet, tmp_path
):
    h = spare_fleet.add("locked")
    stranger = tmp_path / "stranger_ed25519"
    keygen(stranger)
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"client_keys": [str(stranger)]}
    )
    link = HostLink(load_fleet(str(path)).host("locked"))
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert e.value.code == "auth"
    assert f"authentication refused by 127.0.0.1:{h.port}" in e.value.message
    assert link.state == "auth"
    assert link.retry_in() > 60  # not the 1, 2, 4 ... s of a host that is down
    # no attempt is made while nothing changed: with the host gone, the answer is still "auth"
    spare_fleet.kill("locked")
    with pytest.raises(HostError) as again:
        await link.run(["true"])
    assert again.value.code == "auth"
    assert "not retried until the key files" in again.value.message
    # the operator fixes the key: the next use tries at once, and gets in
    spare_fleet.start("locked")
    os.unlink(stranger)
    shutil.copy(spare_fleet.client_key, stranger)
    shutil.copy(f"{spare_fleet.client_key}.pub", f"{stranger}.pub")
    try:
        assert (await link.run(["true"])).returncode == 0
        assert link.state == "up"
    finally:
        await link.close()


async def test_missing_key_file_is_named(spare_fleet, tmp_path):
    spare_fleet.add("keyless")
    missing = tmp_path / "id_missing"
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"client_keys": [str(missing)]}
    )
    link = HostLink(load_fleet(str(path)).host("keyless"))
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert e.value.code == "key-file"
    assert f"key file {missing} does not exist" in e.value.message
    assert link.state == "auth"


async def test_refused_connection_reads_as_refused_with_the_port(spare_fleet, tmp_path):
    h = spare_fleet.add("closed")
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    spare_fleet.kill("closed")
    link = HostLink(load_fleet(str(path)).host("closed"))
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert e.value.code == "unreachable"
    assert e.value.message == f"cannot connect to 127.0.0.1:{h.port}: connection refused"
    assert link.state == "down"


@pytest.fixture
def chatty_host(spare_fleet, tmp_path):
    """A host whose login shell prints a banner on stdout before any command runs (as a
    ~/.bashrc that echoes does; here sshd's ForceCommand prints it, then runs the command)."""
    rc = tmp_path / "noisy-login"
    rc.write_text(
        '#!/bin/sh\necho "Welcome to chatty, $USER"\necho "Last login: yesterday"\n'
        'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
    )
    rc.chmod(0o755)
    spare_fleet.add("chatty", sshd_extra=(f"ForceCommand {rc}",))
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    return load_fleet(str(path))


async def test_login_shell_text_before_a_helper_answer_is_named(chatty_host):
    async with HostLink(chatty_host.host("chatty")) as link:
        assert (await link.run(["printf", "x"])).stdout.startswith(b"Welcome to chatty")
        with pytest.raises(HostError) as e:
            await link.run_helper("import json,sys;print(json.dumps(json.load(sys.stdin)))", [1])
    assert e.value.code == "shell-output"
    assert e.value.message.startswith("the login shell printed text before the helper's answer: ")
    assert "Welcome to chatty" in e.value.message and "Last login" in e.value.message


async def test_a_failed_helper_reports_its_whole_stderr(sshd_fleet, fleet_file):
    src = (
        "import sys\nsys.stderr.write('first: the cause\\nsecond line\\nthird: the symptom\\n')\n"
        "sys.exit(3)\n"
    )
    async with HostLink(load_fleet(str(fleet_file)).host("h1")) as link:
        with pytest.raises(HostError) as e:
            await link.run_helper(src, {})
    assert e.value.code == "helper"
    assert "first: the cause" in e.value.message and "third: the symptom" in e.value.message
    # bounded: a flood of stderr keeps its end, about 4 KB of it
    flood = "import sys\nsys.stderr.write('x' * 100000 + '\\nthe end\\n')\nsys.exit(1)\n"
    async with HostLink(load_fleet(str(fleet_file)).host("h1")) as link:
        with pytest.raises(HostError) as e:
            await link.run_helper(flood, {})
    assert e.value.message.endswith("the end") and len(e.value.message) < 5000


async def test_trust_on_first_use_on_a_fresh_controller(spare_fleet, tmp_path):
    h = spare_fleet.add("first", trust=False)
    kh = tmp_path / "fresh-home" / ".ssh" / "known_hosts"
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"accept_new_host_keys": True, "known_hosts": str(kh)}
    )
    old = os.umask(0o022)
    try:
        async with HostLink(load_fleet(str(path)).host("first")) as link:
            assert (await link.run(["true"])).returncode == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(kh.stat().st_mode) == 0o600
    assert stat.S_IMODE(kh.parent.stat().st_mode) == 0o700
    assert kh.read_text().startswith(f"[127.0.0.1]:{h.port} ssh-ed25519 ")
    # the entry written is the one the next connection checks against
    async with HostLink(load_fleet(str(path)).host("first")) as link:
        assert (await link.run(["true"])).returncode == 0


async def test_trust_on_first_use_asks_the_port_an_ssh_config_alias_names(
    spare_fleet, tmp_path, monkeypatch
):
    h = spare_fleet.add("aliased", trust=False)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host box-alias\n  HostName 127.0.0.1\n  Port {h.port}\n  User {getpass.getuser()}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    kh = tmp_path / "kh" / "known_hosts"
    fleet_file = tmp_path / "hosts.toml"
    fleet_file.write_text(
        spare_fleet.fleet_toml(
            names=[], defaults={"accept_new_host_keys": True, "known_hosts": str(kh)}
        )
        + '\n[hosts.alias]\naddress = "box-alias"\n'
    )
    async with HostLink(load_fleet(str(fleet_file)).host("alias")) as link:
        assert (await link.run(["printf", "%s", "ok"])).stdout == b"ok"
        assert link.where == f"box-alias (127.0.0.1:{h.port})"
    assert kh.read_text().startswith(f"[127.0.0.1]:{h.port} ssh-ed25519 ")


def test_status_cli_tells_a_refused_login_from_a_down_host(spare_fleet, tmp_path):
    import subprocess
    import sys

    spare_fleet.add("locked")
    spare_fleet.add("gone")
    spare_fleet.kill("gone")
    stranger = tmp_path / "stranger"
    keygen(stranger)
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", per_host={"locked": {"client_keys": [str(stranger)]}}
    )
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert p.returncode == 1
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.split()}
    assert "AUTH" in rows["locked"] and "DOWN" in rows["gone"]
    assert "fleetdeck: locked refused our login: authentication refused by 127.0.0.1:" in p.stderr
    assert "fleetdeck: gone is unreachable: cannot connect to 127.0.0.1:" in p.stderr


async def test_a_key_whose_pub_file_does_not_match_is_named(spare_fleet, tmp_path):
    spare_fleet.add("mismatch")
    key, other = tmp_path / "id_a", tmp_path / "id_b"
    keygen(key)
    keygen(other)
    shutil.copy(f"{other}.pub", f"{key}.pub")  # a .pub left over from another key
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"client_keys": [str(key)]})
    link = HostLink(load_fleet(str(path)).host("mismatch"))
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert e.value.code == "key-file"
    assert e.value.message == f"key file {key} cannot be used: Public key mismatch"
