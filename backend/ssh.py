"""Links to hosts: one persistent asyncssh connection per remote host, a subprocess for `local`.

Everything that runs on a host is either a fixed argv (quoted with shlex for the remote shell)
or a stdlib Python helper whose source and JSON input travel on stdin: no untrusted string is
ever pasted into a shell command.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from .bundle import bundle
from .config import HostConfig
from .hostlib.procfs import HELPER_ENV

# Fixed bootstrap: read "<n>\n", then n bytes of Python source, and run it as __main__; what
# follows on stdin is the helper's own input. The marker lets the probe skip its own kind.
BOOT_MARKER = "fleetdeck-helper"
BOOT = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    f"exec(compile(sys.stdin.buffer.read(n),'<{BOOT_MARKER}>','exec'),"
    "{'__name__':'__main__','__builtins__':__builtins__})"
)


class HostError(Exception):
    """A host could not be asked: unreachable, refused, timed out, or a helper failed."""

    def __init__(self, host: str, message: str, code: str = "error") -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message
        self.code = code


@dataclass(frozen=True)
class CommandResult:
    """What a command on a host returned."""

    returncode: int
    stdout: bytes
    stderr: bytes


class HelperProcess:
    """A long-lived helper on a host, with byte streams both ways (ssh channel or subprocess)."""

    def __init__(self, proc: Any, remote: bool, owned: Any = None) -> None:
        self._proc = proc
        self._remote = remote
        self._owned = owned  # a connection of its own (transfer_helper), closed with it
        self.stdin = proc.stdin
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    async def send_json(self, obj: Any) -> None:
        """Write one JSON line to the helper."""
        self.stdin.write(json.dumps(obj).encode() + b"\n")
        await self.stdin.drain()

    async def recv_json(self) -> Any:
        """Read one JSON line from the helper; HostError-free EOFError when it exited."""
        line = await self.stdout.readline()
        if not line:
            raise EOFError("helper exited")
        return json.loads(line)

    async def read_stderr(self, limit: int = 4000) -> str:
        """What the helper said on stderr, after it ended (bounded)."""
        try:
            data = await asyncio.wait_for(self.stderr.read(limit), 2)
        except (TimeoutError, Exception):
            return ""
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)

    def close(self) -> None:
        """Stop the helper now (it is killed, not asked)."""
        try:
            if self._remote:
                self._proc.close()
                if self._owned is not None:
                    self._owned.close()
            else:
                if self._proc.returncode is None:
                    self._proc.kill()
        except (ProcessLookupError, OSError):
            pass

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the helper to exit; its exit status."""
        if self._remote:
            await asyncio.wait_for(self._proc.wait_closed(), timeout)
            return self._proc.exit_status
        return await asyncio.wait_for(self._proc.wait(), timeout)


def _expand(p: str) -> str:
    return os.path.expanduser(p)


def helper_stdin(source: str) -> bytes:
    """The bytes that make BOOT run `source`: helper source text, or the name of a helper
    module (`fleetdeck.backend.actions.purge_remote`), bundled with the host library."""
    if "\n" not in source and source.startswith("fleetdeck."):
        source = bundle(source)
    src = source.encode()
    return str(len(src)).encode() + b"\n" + src


def helper_argv(python: str, args: list[str] | None = None) -> list[str]:
    """argv of a helper on a host: `env` puts the helper marker in its environment, where the
    probe reads it (/proc/PID/environ) to tell fleetdeck's own processes from the user's."""
    return ["env", f"{HELPER_ENV}=1", python, "-c", BOOT, *(args or [])]


class HostLink:
    """How to reach one host: persistent, reconnecting, with host keys always checked."""

    def __init__(self, host: HostConfig) -> None:
        self.host = host
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error: HostError | None = None

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def is_local(self) -> bool:
        return self.host.local

    # -- connection --------------------------------------------------------------------------
    def connect_options(self) -> dict[str, Any]:
        """asyncssh.connect() options for this host (known_hosts, keys, timeouts, keepalive);
        actions that open a connection of their own (bulk copies) start from these."""
        h = self.host
        opts: dict[str, Any] = {
            "known_hosts": _expand(h.known_hosts),
            "connect_timeout": h.connect_timeout,
            "keepalive_interval": max(5.0, min(30.0, h.poll_interval * 3)),
            "keepalive_count_max": 3,
        }
        if h.port is not None:
            opts["port"] = h.port
        if h.user is not None:
            opts["username"] = h.user
        if h.client_keys is not None:
            opts["client_keys"] = [_expand(k) for k in h.client_keys]
            opts["agent_path"] = None
        return opts

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, made (or remade, with backoff after failures) when needed."""
        assert not self.is_local
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._conn = None
            now = time.monotonic()
            if now < self._retry_at and self._last_error is not None:
                wait = self._retry_at - now
                raise HostError(self.name, f"{self._last_error.message} (next retry in {wait:.0f}s)",
                                self._last_error.code)
            try:
                self._conn = await self._connect()
            except HostError as e:
                self._failures += 1
                # back off 1, 2, 4 ... 60 s, but never longer than needed to stay near the poll
                self._retry_at = time.monotonic() + min(60.0, 2 ** (self._failures - 1))
                self._last_error = e
                raise
            self._failures = 0
            self._last_error = None
            return self._conn

    async def _connect(self) -> asyncssh.SSHClientConnection:
        h = self.host
        opts = self.connect_options()
        try:
            return await asyncio.wait_for(asyncssh.connect(h.address, **opts), h.connect_timeout + 1)
        except asyncssh.HostKeyNotVerifiable:
            return await self._unverified_key(opts)
        except TimeoutError:
            raise HostError(self.name, f"connection to {h.address} timed out after {h.connect_timeout:g}s",
                            "timeout") from None
        except asyncssh.PermissionDenied as e:
            raise HostError(self.name, f"authentication refused by {h.address}: {e.reason}", "auth") from None
        except asyncssh.DisconnectError as e:
            raise HostError(self.name, f"{h.address} disconnected: {e.reason}", "disconnected") from None
        except OSError as e:
            raise HostError(self.name, f"cannot connect to {h.address}: {e.strerror or e}", "unreachable") from None

    async def _unverified_key(self, opts: dict[str, Any]) -> asyncssh.SSHClientConnection:
        """Unknown or changed host key: name it; trust a new one only if the fleet file says so."""
        h = self.host
        port = opts.get("port", 22)
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(h.address, port),
                h.connect_timeout + 1)
        except (TimeoutError, OSError, asyncssh.Error) as e:
            raise HostError(self.name, f"host key of {h.address} not verifiable and not readable: {e}",
                            "host-key") from None
        if key is None:
            raise HostError(self.name, f"host key of {h.address} could not be read", "host-key")
        fp = key.get_fingerprint("sha256")
        kh_path = opts["known_hosts"]
        known = _known_keys_for(kh_path, h.address, port)
        if known:
            raise HostError(self.name, f"host key of {h.address} CHANGED: it now presents {key.get_algorithm()} "
                            f"{fp}, which does not match {kh_path}; refusing (remove the old entry only if "
                            "you know why it changed)", "host-key-changed")
        if not h.accept_new_host_keys:
            raise HostError(self.name, f"host key of {h.address} is unknown: {key.get_algorithm()} {fp} "
                            f"is not in {kh_path}; refusing (verify it, then add it, or set "
                            "accept_new_host_keys = true)", "host-key-unknown")
        entry = _known_hosts_name(h.address, port)
        line = f"{entry} {key.export_public_key('openssh').decode().strip()}\n"
        Path(kh_path).parent.mkdir(parents=True, exist_ok=True)
        with open(kh_path, "a", encoding="utf-8") as f:
            f.write(line)
        try:
            return await asyncio.wait_for(asyncssh.connect(h.address, **opts), h.connect_timeout + 1)
        except (TimeoutError, asyncssh.Error, OSError) as e:
            raise HostError(self.name, f"connection to {h.address} failed after trusting new key {fp}: {e}",
                            "unreachable") from None

    async def close(self) -> None:
        """Close the connection (if any)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 2)
            except (TimeoutError, Exception):
                pass

    def drop(self) -> None:
        """Forget the connection after a failure so the next call reconnects."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort()

    # -- running things ----------------------------------------------------------------------
    def _remote_command(self, argv: list[str]) -> str:
        return shlex.join(argv)

    async def run(self, argv: list[str], input: bytes | None = None,
                  timeout: float | None = None) -> CommandResult:
        """Run argv on the host (no shell interpretation of its items); bytes in and out."""
        timeout = self.host.command_timeout if timeout is None else timeout
        if self.is_local:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
            try:
                out, err = await asyncio.wait_for(proc.communicate(input), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise HostError(self.name, f"{argv[0]} timed out after {timeout:g}s", "timeout") from None
            return CommandResult(proc.returncode or 0, out, err)
        conn = await self.connection()
        try:
            res = await asyncio.wait_for(
                conn.run(self._remote_command(argv), input=input, encoding=None, check=False), timeout)
        except TimeoutError:
            raise HostError(self.name, f"{argv[0]} timed out after {timeout:g}s", "timeout") from None
        except (asyncssh.Error, OSError) as e:
            self.drop()
            raise HostError(self.name, f"connection lost: {e}", "disconnected") from None
        rc = res.exit_status if res.exit_status is not None else 255
        return CommandResult(rc, res.stdout or b"", res.stderr or b"")

    async def run_helper(self, source: str, payload: Any, timeout: float | None = None) -> Any:
        """Run a stdlib helper with `payload` as JSON on stdin; its one JSON answer on stdout."""
        data = helper_stdin(source) + json.dumps(payload).encode()
        res = await self.run(helper_argv(self.host.python), input=data, timeout=timeout)
        try:
            return json.loads(res.stdout)
        except ValueError:
            err = res.stderr.decode("utf-8", "replace").strip().splitlines()
            tail = err[-1] if err else f"exit status {res.returncode}, no output"
            raise HostError(self.name, f"helper failed: {tail}", "helper") from None

    async def start_helper(self, source: str, args: list[str] | None = None) -> HelperProcess:
        """Start a resident helper; its source is already sent, the streams are yours."""
        argv = helper_argv(self.host.python, args)
        if self.is_local:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=64 * 1024 * 1024)
            helper = HelperProcess(proc, remote=False)
        else:
            conn = await self.connection()
            try:
                proc = await conn.create_process(self._remote_command(argv), encoding=None)
            except (asyncssh.Error, OSError) as e:
                self.drop()
                raise HostError(self.name, f"connection lost: {e}", "disconnected") from None
            helper = HelperProcess(proc, remote=True)
        helper.stdin.write(helper_stdin(source))
        await helper.stdin.drain()
        return helper


    async def transfer_helper(self, source: str, args: list[str] | None = None) -> HelperProcess:
        """Start a helper for a bulk byte stream (mirror's reader and writer).

        Over SSH it runs on a connection of its own, so polls on the shared connection are
        not queued behind the stream, with AES-GCM preferred and a 16 MiB receive window:
        relaying 1 GiB here (2 cores) took ~130 MB/s on a default channel (2 MiB window,
        chacha20-poly1305) and ~300 MB/s on this one. Host keys are checked as for `connection()`;
        when that connection cannot be made, the shared one carries the stream. Closing the
        helper closes its connection. A `local` host gets `start_helper`.
        """
        if self.is_local:
            return await self.start_helper(source, args)
        opts = {**self.connect_options(), "encryption_algs": TRANSFER_CIPHERS}
        own: asyncssh.SSHClientConnection | None
        try:
            own = await asyncio.wait_for(asyncssh.connect(self.host.address, **opts),
                                         self.host.connect_timeout + 1)
        except (asyncssh.Error, OSError, TimeoutError):
            own = None
        conn = own if own is not None else await self.connection()
        try:
            proc = await conn.create_process(self._remote_command(helper_argv(self.host.python, args)),
                                             encoding=None, window=TRANSFER_WINDOW,
                                             max_pktsize=TRANSFER_PKTSIZE)
        except (asyncssh.Error, OSError) as e:
            if own is not None:
                own.close()
            else:
                self.drop()
            raise HostError(self.name, f"connection lost: {e}", "disconnected") from None
        helper = HelperProcess(proc, remote=True, owned=own)
        helper.stdin.write(helper_stdin(source))
        await helper.stdin.drain()
        return helper


TRANSFER_CIPHERS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
                    "chacha20-poly1305@openssh.com", "aes128-ctr", "aes256-ctr"]
TRANSFER_WINDOW = 16 * 1024 * 1024
TRANSFER_PKTSIZE = 256 * 1024


def _known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _known_keys_for(path: str, address: str, port: int) -> list[Any]:
    """Keys known_hosts already holds for this host (any algorithm): non-empty means 'changed'."""
    try:
        kh = asyncssh.read_known_hosts(path)
    except (OSError, ValueError, asyncssh.Error):
        return []
    try:
        ip = address if _is_ip(address) else None
        trusted, ca, revoked, *_ = kh.match(address, ip, port)
    except Exception:
        return []
    return list(trusted) + list(ca) + list(revoked)


def _is_ip(s: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False
