"""known_hosts look-ups for the host-key check: a key already known is found, so a changed key
is named as changed and never trusted as new."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import asyncssh

from fleetdeck.backend.fleet.link import known_hosts


def _hashed(name: str, key_line: str) -> str:
    """A line as OpenSSH writes it with HashKnownHosts yes."""
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()} {key_line}\n"


def _key_line() -> str:
    return (
        asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()
    )


def test_a_key_is_found_in_a_hashed_file_beside_other_hosts(tmp_path):
    path = tmp_path / "known_hosts"
    mine = _key_line()
    path.write_text(_hashed("other.example", _key_line()) + _hashed("box.example", mine))
    found = known_hosts.keys_for(str(path), "box.example", 22)
    assert [k.export_public_key("openssh").decode().strip() for k in found] == [mine]


def test_a_key_is_found_off_port_22(tmp_path):
    path = tmp_path / "known_hosts"
    mine = _key_line()
    name = known_hosts.entry_name("box.example", 2222)
    path.write_text(_hashed("other.example", _key_line()) + _hashed(name, mine))
    found = known_hosts.keys_for(str(path), "box.example", 2222)
    assert [k.export_public_key("openssh").decode().strip() for k in found] == [mine]


def test_nothing_is_found_for_an_unknown_host(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(_hashed("other.example", _key_line()))
    assert known_hosts.keys_for(str(path), "box.example", 22) == []
