"""Links over real sshd: commands, helpers, host-key checking, a host that goes away."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink

from support.sshfleet import keygen

pytestmark = pytest.mark.sshd

HOSTILE = [
    "a b",
    "it's",
    'say "hi"',
    "$(touch /tmp/fleetdeck-pwned)",
    "-rf",
    "line\nbreak",
    "`id`;",
]


async def test_argv_and_helper_payload_cross_the_shell_untouched(sshd_fleet, fleet_file):
    link = HostLink(load_fleet(str(fleet_file)).host("h1"))
    try:
        res = await link.run(["printf", "%s\\0", *HOSTILE])
        assert res.returncode == 0
        assert res.stdout.split(b"\0")[:-1] == [s.encode() for s in HOSTILE]
        src = "import json,sys\nd=json.load(sys.stdin)\nprint(json.dumps({'back': d}))\n"
        assert await link.run_helper(src, HOSTILE) == {"back": HOSTILE}
    finally:
        await link.close()
    import os

    assert not os.path.exists("/tmp/fleetdeck-pwned")


async def test_connection_is_reused(sshd_fleet, fleet_file):
    link = HostLink(load_fleet(str(fleet_file)).host("h1"))
    try:
        await link.run(["true"])
        first = await link.connection()
        await link.run(["true"])
        assert await link.connection() is first
    finally:
        await link.close()


async def test_unknown_host_key_refused_with_fingerprint(spare_fleet, tmp_path):
    spare_fleet.add("stranger", trust=False)
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    link = HostLink(load_fleet(str(path)).host("stranger"))
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert e.value.code == "host-key-unknown"
    assert "SHA256:" in e.value.message and "stranger" in str(e.value)


async def test_accept_new_trusts_a_new_key_once(spare_fleet, tmp_path):
    spare_fleet.add("newbie", trust=False)
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"accept_new_host_keys": True})
    link = HostLink(load_fleet(str(path)).host("newbie"))
    try:
        assert (await link.run(["true"])).returncode == 0
    finally:
        await link.close()
    assert f"[127.0.0.1]:{spare_fleet.hosts['newbie'].port}" in spare_fleet.known_hosts.read_text()


@pytest.mark.parametrize("accept_new", [False, True])
async def test_changed_host_key_always_refused(spare_fleet, tmp_path, accept_new):
    h = spare_fleet.add("shifty")  # trusted with its first key
    spare_fleet.kill("shifty")
    h.host_key.unlink()
    (h.host_key.parent / (h.host_key.name + ".pub")).unlink()
    keygen(h.host_key)
    spare_fleet.start("shifty")
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"accept_new_host_keys": accept_new}
    )
    before = spare_fleet.known_hosts.read_text()
    link = HostLink(load_fleet(str(path)).host("shifty"))
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert e.value.code == "host-key-changed"
    assert "CHANGED" in e.value.message and "SHA256:" in e.value.message
    assert spare_fleet.known_hosts.read_text() == before


async def test_down_host_fails_within_connect_timeout(spare_fleet, tmp_path):
    spare_fleet.add("gone")
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"connect_timeout": 2})
    spare_fleet.kill("gone")
    link = HostLink(load_fleet(str(path)).host("gone"))
    t0 = time.monotonic()
    with pytest.raises(HostError) as e:
        await link.run(["true"])
    assert time.monotonic() - t0 < 2 + 1.5  # connect_timeout plus the wait_for margin
    assert e.value.code in ("unreachable", "timeout")


async def test_command_timeout_cuts_off_a_hung_command(sshd_fleet, fleet_file):
    link = HostLink(load_fleet(str(fleet_file)).host("h2"))
    try:
        with pytest.raises(HostError) as e:
            await link.run(["sleep", "30"], timeout=0.5)
        assert e.value.code == "timeout"
        assert (await link.run(["true"])).returncode == 0  # the link still works afterwards
    finally:
        await link.close()


async def test_local_host_runs_without_ssh():
    from fleetdeck.backend.fleet.config import HostConfig

    link = HostLink(HostConfig(name="local", local=True))
    res = await link.run(["printf", "%s", "$(x) y"])
    assert res.stdout == b"$(x) y"
    assert (
        await link.run_helper("import json,sys;print(json.dumps(json.load(sys.stdin)+1))", 41) == 42
    )
    h = await link.start_helper(
        "import sys\nfor l in sys.stdin: print(l.strip()[::-1], flush=True)\n"
    )
    h.stdin.write(b"abc\n")
    await h.stdin.drain()
    assert (await asyncio.wait_for(h.stdout.readline(), 10)) == b"cba\n"
    h.close()
    await h.wait(10)


async def test_ssh_config_alias_is_honoured(sshd_fleet, tmp_path, monkeypatch):
    """`address` may be a Host alias from ~/.ssh/config: HostName, Port and User come from it."""
    import getpass

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    h = sshd_fleet.hosts["h2"]
    (home / ".ssh" / "config").write_text(
        f"Host gpu-box-alias\n  HostName 127.0.0.1\n  Port {h.port}\n  User {getpass.getuser()}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    fleet_file = tmp_path / "hosts.toml"
    fleet_file.write_text(
        sshd_fleet.fleet_toml(names=[]) + '\n[hosts.alias]\naddress = "gpu-box-alias"\n'
    )
    link = HostLink(load_fleet(str(fleet_file)).host("alias"))
    try:
        res = await link.run(["printf", "%s", "via alias"])
        assert res.stdout == b"via alias"
    finally:
        await link.close()


async def test_polls_ride_aes_gcm_unless_the_operators_ssh_config_names_ciphers(
    sshd_fleet, fleet_file, tmp_path, monkeypatch
):
    """The shared connection negotiates AES-GCM (one library call a packet, where asyncssh's
    chacha20-poly1305 takes four); an operator's `Ciphers` line in ~/.ssh/config wins."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    host = load_fleet(str(fleet_file)).host("h1")
    link = HostLink(host)
    try:
        conn = await link.connection()
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
        assert conn.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
    finally:
        await link.close()
    (home / ".ssh" / "config").write_text("Host *\n  Ciphers chacha20-poly1305@openssh.com\n")
    link = HostLink(host)
    try:
        conn = await link.connection()
        assert conn.get_extra_info("send_cipher") == "chacha20-poly1305@openssh.com"
        assert await link.run_helper("print('{}')", []) == {}
    finally:
        await link.close()
