"""Connecting to a host: one persistent asyncssh connection, made and remade with backoff,
host keys always checked, authentication failures named and not retried until something that
could fix them changes. `HostLink` (ssh.py) runs things over it."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import time
from typing import Any, TypeVar

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link import known_hosts
from fleetdeck.backend.fleet.link.sshlib import asyncssh

# Authentication refused (or a key file missing) is not retried until the key files, the
# ssh config or the fleet file change, or this long has passed: a retry would be refused the
# same way, and sshd logs (and fail2ban counts) every attempt.
AUTH_BACKOFF = 600.0
AUTH_CODES = ("auth", "key-file")
#: closing a connection waits at most this long for it to be closed (then it is aborted)
CLOSE_WITHIN = 1.0


#: the ciphers offered, AES-GCM first: asyncssh's chacha20-poly1305 takes four calls into the
#: crypto library a packet where AES-GCM takes one (about 20 us against 3 to encrypt a packet
#: here), and a poll is a few small packets each way; the remote sshd spends less too. An
#: operator's own `Ciphers` line in ~/.ssh/config wins (`_config_names_ciphers`).
CIPHERS = [
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
]
_CIPHERS_LINE = re.compile(rb"^[ \t]*ciphers\b", re.IGNORECASE | re.MULTILINE)


def _expand(p: str) -> str:
    return os.path.expanduser(p)


def _config_names_ciphers() -> bool:
    """Whether ~/.ssh/config (which asyncssh reads) has a `Ciphers` line for some host."""
    try:
        with open(_expand("~/.ssh/config"), "rb") as f:
            return _CIPHERS_LINE.search(f.read(1 << 20)) is not None
    except OSError:
        return False


def hostport(host: str, port: int) -> str:
    """`host:port` as an address is written (`[::1]:22` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _file_stamp(path: str) -> tuple[str, int, int, int] | tuple[str]:
    try:
        st = os.stat(path)
    except OSError:
        return (path,)
    return (path, st.st_mtime_ns, st.st_size, st.st_ino)


def _os_reason(e: OSError) -> str:
    """An OSError as words: asyncio's 'Connect call failed (...)' is a refused connection."""
    text = str(e)
    if e.errno == errno.ECONNREFUSED or "Connect call failed" in text:
        return "connection refused"
    if e.errno == errno.ENOENT and e.filename:
        return f"{e.filename} does not exist"
    return (e.strerror or text or type(e).__name__).rstrip(".")


_C = TypeVar("_C", bound="Connector")


class Connector:
    """How to reach one host: persistent, reconnecting, with host keys always checked
    (the connecting half of `HostLink`).

    An async context manager: `async with HostLink(cfg) as link:` closes the connection at
    the end. After a failure the next use reconnects, backing off 1, 2, 4 ... 60 s; after
    authentication was refused it waits for a key file, the ssh config or the fleet file to
    change (or AUTH_BACKOFF) instead, so `state` stays `auth` rather than `down`.
    """

    def __init__(self, host: HostConfig) -> None:
        self.host = host
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error: HostError | None = None
        self._auth_stamp: tuple[Any, ...] | None = None
        self._target: tuple[str, int] | None = None
        self._user: str | None = None

    async def __aenter__(self: _C) -> _C:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def is_local(self) -> bool:
        return self.host.local

    @property
    def where(self) -> str:
        """The address as errors name it: `host:port`; an ssh-config alias with what it
        resolved to, `alias (hostname:port)`."""
        h = self.host
        if self._target is None:
            return hostport(h.address, h.port or 22)
        real, port = self._target
        return (
            hostport(real, port) if real == h.address else f"{h.address} ({hostport(real, port)})"
        )

    @property
    def state(self) -> str:
        """`up` (connected), `auth` (authentication refused: waiting for a change), `down`
        (the last attempt failed otherwise) or `idle` (not connected yet)."""
        if self._conn is not None and not self._conn.is_closed():
            return "up"
        if self._last_error is None:
            return "idle"
        return "auth" if self._last_error.code in AUTH_CODES else "down"

    def retry_in(self) -> float:
        """Seconds until the next connection attempt is allowed (0: now)."""
        return max(0.0, self._retry_at - time.monotonic()) if self._last_error else 0.0

    # -- connection --------------------------------------------------------------------------
    def connect_options(self) -> dict[str, Any]:
        """asyncssh.connect() options for this host (known_hosts, keys, timeouts, keepalive,
        ciphers); actions that open a connection of their own (bulk copies) start from these."""
        h = self.host
        kh = _expand(h.known_hosts)
        opts: dict[str, Any] = {
            # a fresh controller has no known_hosts yet: nothing is trusted, nothing fails
            "known_hosts": kh if os.path.exists(kh) else asyncssh.import_known_hosts(""),
            "connect_timeout": h.connect_timeout,
            "keepalive_interval": max(5.0, min(30.0, h.poll_interval * 3)),
            "keepalive_count_max": 3,
        }
        if not _config_names_ciphers():
            opts["encryption_algs"] = CIPHERS
        if h.port is not None:
            opts["port"] = h.port
        if h.user is not None:
            opts["username"] = h.user
        if h.client_keys is not None:
            opts["client_keys"] = [_expand(k) for k in h.client_keys]
            opts["agent_path"] = None
        return opts

    def _auth_inputs(self) -> tuple[Any, ...]:
        """What a refused login could be fixed by: the fleet-file entry, the key files, the
        ssh config and the agent."""
        keys = self.host.client_keys or ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
        files = [_expand(k) for k in keys] + [_expand("~/.ssh/config")]
        return (
            self.host,
            os.environ.get("SSH_AUTH_SOCK"),
            *(_file_stamp(p) for p in files),
            *(_file_stamp(p + ".pub") for p in files),
        )

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, made (or remade, with backoff after failures) when needed."""
        assert not self.is_local
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._conn = None
            now = time.monotonic()
            last = self._last_error
            if last is not None and last.code in AUTH_CODES:
                if self._auth_inputs() == self._auth_stamp and now < self._retry_at:
                    raise HostError(
                        self.name,
                        f"{last.message} (not retried until the key files, "
                        "~/.ssh/config or the fleet file change, or in "
                        f"{self._retry_at - now:.0f}s)",
                        last.code,
                    )
            elif last is not None and now < self._retry_at:
                raise HostError(
                    self.name,
                    f"{last.message} (next retry in {self._retry_at - now:.0f}s)",
                    last.code,
                )
            try:
                self._conn = await self._connect()
            except HostError as e:
                self._failures += 1
                self._last_error = e
                if e.code in AUTH_CODES:
                    self._auth_stamp = self._auth_inputs()
                    self._retry_at = time.monotonic() + AUTH_BACKOFF
                else:
                    self._retry_at = time.monotonic() + min(60.0, 2 ** (self._failures - 1))
                raise
            self._failures = 0
            self._last_error = None
            return self._conn

    async def _resolve(self) -> tuple[str, int]:
        """(hostname, port) that `address` stands for, ~/.ssh/config aliases resolved the way
        asyncssh will resolve them when connecting."""
        h = self.host
        kw: dict[str, Any] = {"config": (), "host": h.address, "known_hosts": None}
        if h.port is not None:
            kw["port"] = h.port
        try:
            o = await asyncssh.SSHClientConnectionOptions.construct(None, **kw)
            self._target = (str(o.host), int(o.port))
            self._user = h.user or getattr(o, "username", None)
        except (asyncssh.Error, OSError, ValueError):
            self._target = (h.address, h.port or 22)
        return self._target

    async def _connect(self) -> asyncssh.SSHClientConnection:
        h = self.host
        opts = self.connect_options()
        await self._resolve()
        for k in h.client_keys or ():
            if not os.path.exists(_expand(k)):
                raise HostError(
                    self.name,
                    f"key file {k} does not exist (client_keys in the fleet file)",
                    "key-file",
                )
        try:
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for loses a cancellation that
            # comes as the connection is made, and waits for the attempt it cancels
            async with asyncio.timeout(h.connect_timeout + 1):
                return await asyncssh.connect(h.address, **opts)
        except asyncssh.HostKeyNotVerifiable:
            return await self._unverified_key(opts)
        except TimeoutError:
            raise HostError(
                self.name,
                f"connection to {self.where} timed out after {h.connect_timeout:g}s",
                "timeout",
            ) from None
        except asyncssh.PermissionDenied as e:
            user = h.user or self._user or "the default user"
            raise HostError(
                self.name, f"authentication refused by {self.where} for {user}: {e.reason}", "auth"
            ) from None
        except (asyncssh.KeyImportError, ValueError) as e:
            # asyncssh reads the key files before connecting: "Public key mismatch" means
            # id_x.pub is not the public half of id_x
            if isinstance(e, ValueError) and "key" not in str(e).lower():
                raise HostError(
                    self.name, f"cannot connect to {self.where}: {e}", "unreachable"
                ) from None
            raise HostError(
                self.name, f"{self._bad_key()} cannot be used: {e}", "key-file"
            ) from None
        except asyncssh.DisconnectError as e:
            raise HostError(
                self.name, f"{self.where} disconnected: {e.reason}", "disconnected"
            ) from None
        except OSError as e:
            raise HostError(
                self.name, f"cannot connect to {self.where}: {_os_reason(e)}", "unreachable"
            ) from None

    def _bad_key(self) -> str:
        """Which configured key file asyncssh could not load, as the fleet file names it."""
        for k in self.host.client_keys or ():
            try:
                asyncssh.load_keypairs([_expand(k)])
            except (asyncssh.KeyImportError, ValueError, OSError):
                return f"key file {k}"
        return "a key file"

    async def _unverified_key(self, opts: dict[str, Any]) -> asyncssh.SSHClientConnection:
        """Unknown or changed host key: name it; trust a new one only if the fleet file says so."""
        h = self.host
        real, port = self._target or (h.address, h.port or 22)
        try:
            async with asyncio.timeout(h.connect_timeout + 1):
                key = await asyncssh.get_server_host_key(real, port)
        except (TimeoutError, OSError, asyncssh.Error) as e:
            raise HostError(
                self.name,
                f"host key of {self.where} not verifiable and not readable: {e}",
                "host-key",
            ) from None
        if key is None:
            raise HostError(self.name, f"host key of {self.where} could not be read", "host-key")
        fp = key.get_fingerprint("sha256")
        kh_path = _expand(h.known_hosts)
        if known_hosts.keys_for(kh_path, real, port):
            raise HostError(
                self.name,
                f"host key of {self.where} CHANGED: it now presents {key.get_algorithm()} "
                f"{fp}, which does not match {h.known_hosts}; refusing (remove the old entry only if "
                "you know why it changed)",
                "host-key-changed",
            )
        if not h.accept_new_host_keys:
            raise HostError(
                self.name,
                f"host key of {self.where} is unknown: {key.get_algorithm()} {fp} "
                f"is not in {h.known_hosts}; refusing (verify it, then add it, or set "
                "accept_new_host_keys = true)",
                "host-key-unknown",
            )
        known_hosts.append_entry(
            kh_path,
            f"{known_hosts.entry_name(real, port)} "
            f"{key.export_public_key('openssh').decode().strip()}\n",
        )
        opts = dict(opts, known_hosts=kh_path)
        try:
            async with asyncio.timeout(h.connect_timeout + 1):
                return await asyncssh.connect(h.address, **opts)
        except asyncssh.PermissionDenied as e:
            raise HostError(
                self.name,
                f"trusted the new host key {fp} of {self.where}, then authentication "
                f"was refused: {e.reason}",
                "auth",
            ) from None
        except (TimeoutError, asyncssh.Error, OSError) as e:
            raise HostError(
                self.name,
                f"connection to {self.where} failed after trusting new key {fp}: {e}",
                "unreachable",
            ) from None

    async def close(self) -> None:
        """Close the connection (if any): the host is told, and the connection is closed here
        whether it answers or not (aborted after at most CLOSE_WITHIN seconds, or at once when
        the close is cancelled)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.close()
        try:
            async with asyncio.timeout(CLOSE_WITHIN):
                await conn.wait_closed()
        except Exception:
            conn.abort()
        except BaseException:
            conn.abort()
            raise

    def drop(self) -> None:
        """Forget the connection after a failure so the next call reconnects."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort()
