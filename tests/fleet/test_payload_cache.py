"""The host's payload cache, on real sshd hosts: kept on first contact, named by its sha256,
asked for by name afterwards; never run when anything about it cannot be trusted.

Each host here gets its own cache folder (`SetEnv XDG_CACHE_HOME=...` in its sshd_config).
What the controller sends is recorded where it is made (`ssh.payload_stdin`). A tampered
cache holds bytecode that would write a marker file if it ran: the marker never appears.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link import ssh
from fleetdeck.backend.fleet.link.bundle import payload
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.poller import PROBE_MODULE, Poller
from fleetdeck.backend.host.lib import payload as host_payload

pytestmark = pytest.mark.sshd

PING = {"op": "ping"}


@pytest.fixture
def sent(monkeypatch):
    """Every payload frame the controller makes: (cached?, keep?, bytes)."""
    frames: list[tuple[bool, bool, bytes]] = []
    real = ssh.payload_stdin

    def record(p, cached, keep=True):
        data = real(p, cached, keep)
        frames.append((cached, keep, data))
        return data

    monkeypatch.setattr(ssh, "payload_stdin", record)
    return frames


@pytest.fixture
def host(spare_fleet, tmp_path):
    """One sshd host whose cache lives under tmp_path/cache; (fleet file, cache folder)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    spare_fleet.add("pc", sshd_extra=(f"SetEnv XDG_CACHE_HOME={cache}",))
    return (
        spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"command_timeout": 90}),
        cache / "fleetdeck" / "payload",
    )


@pytest.fixture
def stranger():
    """A throwaway user (removed at the end) to own what the host's user must not trust."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd for a second user")
    name = f"fdpc{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def _link(fleet_file: Path) -> HostLink:
    return HostLink(load_fleet(str(fleet_file)).host("pc"))


def _sha(name: str = PROBE_MODULE) -> str:
    return payload(name).sha256


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def _evil_cache(folder: Path, marker: Path, name: str = PROBE_MODULE) -> None:
    """A cache for payload `name` whose payload file is genuine and whose bytecode, with a
    header and digest that match, writes `marker` when it runs."""
    folder.mkdir(parents=True, exist_ok=True)
    p = payload(name)
    (folder / f"{p.sha256}.json").write_bytes(p.data)
    evil = compile(f"open({str(marker)!r}, 'w').write('ran')\n", "<evil>", "exec")
    doc = json.loads(p.data)
    codes = {m[0]: evil for m in doc["modules"]}
    # the fleet's hosts run this same Python (sshfleet), so this tag is theirs
    (folder / f"{p.sha256}.{host_payload.code_tag()}.code").write_bytes(
        host_payload._code_bytes(p.sha256, codes)
    )
    for f in folder.iterdir():
        f.chmod(0o600)


def _assert_kept(folder: Path, sha: str) -> None:
    st = folder.lstat()
    assert (
        stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    )
    data = (folder / f"{sha}.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha
    assert any(n.startswith(sha + ".") and n.endswith(".code") for n in _files(folder))


# -- kept, then asked for by name -----------------------------------------------------------------
async def test_the_first_connection_keeps_the_payload_and_the_next_sends_only_its_name(host, sent):
    fleet_file, folder = host
    sha = _sha()
    async with Poller(load_fleet(str(fleet_file))) as poller:
        snap = await poller.poll()
    assert snap.hosts[0].reachable, snap.hosts[0].error
    _assert_kept(folder, sha)
    assert stat.S_IMODE(folder.parent.lstat().st_mode) == 0o700
    # first contact: asked by name, answered "missing", then sent whole (compressed) to keep
    assert [(c, k) for c, k, _ in sent] == [(True, True), (False, True)]
    assert len(sent[1][2]) > 50_000
    sent.clear()
    async with Poller(load_fleet(str(fleet_file))) as poller:  # a new controller, new connection
        snap = await poller.poll()
        assert snap.hosts[0].reachable, snap.hosts[0].error
        again = await poller.poll()  # the resident probe, from the cache, answers on
        assert again.hosts[0].reachable
    assert [(c, k) for c, k, _ in sent] == [(True, True)]
    assert len(sent[0][2]) < 16_000 and sha.encode() in sent[0][2]


async def test_one_shot_helpers_are_kept_and_named_too(host, sent):
    fleet_file, folder = host
    async with _link(fleet_file) as link:
        assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
        assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
    assert [c for c, _, _ in sent] == [True, False, True]
    _assert_kept(folder, _sha())


# -- never run what cannot be trusted, and replace it -------------------------------------------
async def _answers_and_replaces(fleet_file: Path, folder: Path, marker: Path, sent: list) -> None:
    async with _link(fleet_file) as link:
        assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
        assert [c for c, _, _ in sent] == [True, False], "the untrusted cache was not a miss"
        assert not marker.exists(), "code from an untrusted cache ran"
        _assert_kept(folder, _sha())
        sent.clear()
        assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
        assert [c for c, _, _ in sent] == [True]  # the replacement is used
    assert not marker.exists()


async def test_a_payload_whose_content_differs_from_its_name_is_not_run(host, sent, tmp_path):
    fleet_file, folder = host
    marker = tmp_path / "ran"
    _evil_cache(folder, marker)
    folder.chmod(0o700)
    folder.parent.chmod(0o700)
    # the payload file altered: its bytecode (whose digest matches) must not run either
    f = folder / f"{_sha()}.json"
    f.write_bytes(f.read_bytes().replace(b'"format":1', b'"format":1 '))
    await _answers_and_replaces(fleet_file, folder, marker, sent)


async def test_a_cache_folder_of_another_user_is_not_run_and_is_moved_aside(
    host, sent, tmp_path, stranger
):
    fleet_file, folder = host
    marker = tmp_path / "ran"
    _evil_cache(folder, marker)
    folder.chmod(0o700)
    folder.parent.chmod(0o700)
    shutil.chown(folder, stranger)
    await _answers_and_replaces(fleet_file, folder, marker, sent)
    aside = [p for p in folder.parent.iterdir() if p.name.startswith("payload.untrusted-")]
    assert len(aside) == 1 and aside[0].stat().st_uid != os.geteuid()


async def test_cached_files_of_another_user_are_not_run(host, sent, tmp_path, stranger):
    fleet_file, folder = host
    marker = tmp_path / "ran"
    _evil_cache(folder, marker)
    folder.chmod(0o700)
    folder.parent.chmod(0o700)
    for f in folder.iterdir():
        shutil.chown(f, stranger)
    async with _link(fleet_file) as link:
        assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
    assert not marker.exists()
    _assert_kept(folder, _sha())
    assert all(f.stat().st_uid == os.geteuid() for f in folder.iterdir())


async def test_a_group_writable_cache_folder_is_not_run(host, sent, tmp_path):
    fleet_file, folder = host
    marker = tmp_path / "ran"
    _evil_cache(folder, marker)
    folder.parent.chmod(0o700)
    folder.chmod(0o770)
    await _answers_and_replaces(fleet_file, folder, marker, sent)


async def test_a_symlinked_cache_folder_is_never_followed(host, sent, tmp_path):
    fleet_file, folder = host
    marker = tmp_path / "ran"
    elsewhere = tmp_path / "elsewhere"
    _evil_cache(elsewhere, marker)
    elsewhere.chmod(0o700)
    folder.parent.mkdir(parents=True, mode=0o700)
    folder.symlink_to(elsewhere)
    await _answers_and_replaces(fleet_file, folder, marker, sent)
    assert not folder.is_symlink()
    assert (elsewhere / f"{_sha()}.json").exists()  # moved aside, not emptied through the link


# -- a cache that cannot be written ------------------------------------------------------------------
async def test_a_host_whose_cache_cannot_be_written_gets_the_payload_each_time(host, sent):
    fleet_file, folder = host
    folder.parent.write_text("not a folder\n")  # a file where the cache's folder should be
    for _ in range(2):
        async with Poller(load_fleet(str(fleet_file))) as poller:  # a new controller each time
            for _ in range(2):
                snap = await poller.poll()
                assert snap.hosts[0].reachable, snap.hosts[0].error
    # asked by name, then sent whole (to be kept, which fails quietly on the host)
    assert [(c, k) for c, k, _ in sent] == [(True, True), (False, True)] * 2
    sent.clear()
    async with _link(fleet_file) as link:
        for _ in range(3):
            assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
    # the same link, once it saw the payload it had sent to be kept missing again, sends it
    # whole without asking
    assert [(c, k) for c, k, _ in sent] == [(True, True), (False, True)] * 2 + [(False, False)]
    assert all(len(d) > 50_000 for c, _, d in sent if not c)
    assert folder.parent.read_text() == "not a folder\n"


@pytest.fixture
def login():
    """A throwaway login with a shell and a home (sshd refuses a locked account), removed at
    the end; a loopback sshd it can log in to, whose XDG_CACHE_HOME is a folder of root's
    that the login may read but not write. (fleet file, that folder)"""
    if os.geteuid() != 0 or not all(map(shutil.which, ("useradd", "userdel"))):
        pytest.skip("needs root and useradd for a second user")
    from support.sshfleet import SshdFleet

    name = f"fdpc{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/sh", "--password", "*", name], check=True
    )
    base = Path(tempfile.mkdtemp(prefix="fd-pc-", dir="/tmp"))
    fleet = None
    try:
        os.chmod(base, 0o755)
        cache = base / "cache"
        cache.mkdir(mode=0o755)
        fleet = SshdFleet(base)
        os.chmod(fleet.authorized_keys, 0o644)  # the fleet's keys must be readable by the login
        fleet.add("pc", sshd_extra=(f"SetEnv XDG_CACHE_HOME={cache}",))
        text = fleet.fleet_toml(defaults={"python": "/usr/bin/python3", "command_timeout": 90})
        path = base / "hosts.toml"
        path.write_text(text.replace(f'user = "{getpass.getuser()}"', f'user = "{name}"'))
        yield path, cache
    finally:
        if fleet is not None:
            fleet.stop_all()
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)


async def test_a_login_that_cannot_write_its_cache_folder_gets_the_payload_each_time(login, sent):
    fleet_file, cache = login
    for _ in range(2):
        async with Poller(load_fleet(str(fleet_file))) as poller:
            snap = await poller.poll()
            assert snap.hosts[0].reachable, snap.hosts[0].error
        async with _link(fleet_file) as link:
            for _ in range(3):
                assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
    once = [(True, True), (False, True)]
    assert [(c, k) for c, k, _ in sent] == (once + once * 2 + [(False, False)]) * 2
    assert list(cache.iterdir()) == []


# -- the fleet file's switch ------------------------------------------------------------------------
async def test_payload_cache_false_sends_the_payload_and_keeps_nothing(spare_fleet, tmp_path, sent):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    spare_fleet.add("pc", sshd_extra=(f"SetEnv XDG_CACHE_HOME={cache}",))
    fleet_file = spare_fleet.write_fleet(
        tmp_path / "hosts.toml",
        per_host={"pc": {"payload_cache": False}},
        defaults={"command_timeout": 90},
    )
    async with Poller(load_fleet(str(fleet_file))) as poller:
        snap = await poller.poll()
    assert snap.hosts[0].reachable, snap.hosts[0].error
    async with _link(fleet_file) as link:
        assert (await link.run_helper(PROBE_MODULE, PING))["ok"] is True
    assert [(c, k) for c, k, _ in sent] == [(False, False), (False, False)]
    assert list(cache.iterdir()) == []
