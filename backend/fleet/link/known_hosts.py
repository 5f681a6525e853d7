"""known_hosts: what it holds for a host, and trust on first use written the way OpenSSH writes it."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet.link.sshlib import asyncssh


def entry_name(address: str, port: int) -> str:
    """The host field of a known_hosts line: `name`, or `[name]:port` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def append_entry(path: str, line: str) -> None:
    """Append a trusted key; a known_hosts made here is 600 and a folder made here 700, as
    OpenSSH makes them."""
    folder = Path(path).parent
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for d in reversed(missing):
        os.mkdir(d, 0o700)
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        if missing or os.fstat(fd).st_size == 0:
            os.fchmod(fd, 0o600)
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def keys_for(path: str, address: str, port: int) -> list[Any]:
    """Keys known_hosts already holds for this host (any algorithm): non-empty means 'changed'."""
    try:
        kh = asyncssh.read_known_hosts(path)
    except (OSError, ValueError, asyncssh.Error):
        return []
    try:
        # "" rather than None: asyncssh retries a miss on `[name]:port` without the port, and
        # there a None address broke on the first hashed line of another host (so a known key
        # read as unknown)
        ip = address if is_ip(address) else ""
        trusted, ca, revoked, *_ = kh.match(address, ip, port)
    except Exception:
        return []
    return list(trusted) + list(ca) + list(revoked)


def is_ip(s: str) -> bool:
    """True for an IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False
