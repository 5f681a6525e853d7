"""Links to hosts: one persistent asyncssh connection per remote host, a subprocess for `local`.

Everything that runs on a host is either a fixed argv (quoted with shlex for the remote shell)
or a stdlib Python helper whose source and JSON input travel on stdin: no untrusted string is
ever pasted into a shell command.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shlex
import time
from dataclasses import dataclass
from typing import Any

import asyncssh

from fleetdeck.backend.fleet import known_hosts
from fleetdeck.backend.fleet.bundle import payload_for
from fleetdeck.backend.fleet.channel import (  # noqa: F401 - BOOT, HelperProcess... are imported from here by actions
    ANSWER_LIMIT,
    BOOT,
    BOOT_MARKER,
    OUTPUT_LIMIT,
    SHELL_NOISE,
    STDERR_KEEP,
    STDERR_LIMIT,
    WATCHDOG,
    AnswerTooLarge,
    HelperProcess,
    ShellOutputError,
    bounded_text,
    helper_argv,
    helper_stdin,
    is_missing,
    loads,
    noise_text,
    payload_stdin,
    read_bounded,
    sudo_refused,
)
from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.host.lib.text import shown

SUDO_SENTENCE = ("sudo asks for a password (become = \"sudo\" runs helpers with sudo -n): give {user} a "
                 "NOPASSWD sudoers line for the host's python3 (docs/fleet-file.md shows it)")


def sudo_error(host: HostConfig, stderr: str) -> HostError | None:
    """The error for a helper that sudo would not run without a password (None otherwise):
    the one sentence and code every caller reports it with."""
    if not sudo_refused(stderr):
        return None
    return HostError(host.name, SUDO_SENTENCE.format(user=host.user or "the login"), "sudo-password")

# Authentication refused (or a key file missing) is not retried until the key files, the
# ssh config or the fleet file change, or this long has passed: a retry would be refused the
# same way, and sshd logs (and fail2ban counts) every attempt.
AUTH_BACKOFF = 600.0
AUTH_CODES = ("auth", "key-file")
# After a host's payload cache failed to keep a payload, it is sent whole for this long before
# the cache is tried again (it may have been a full disk).
CACHE_RETRY = 600.0


class HostError(Exception):
    """A host could not be asked: unreachable, refused, timed out, or a helper failed. `code`
    says which: timeout, unreachable, auth, key-file, host-key-unknown, host-key-changed,
    disconnected, shell-output, helper, probe..."""

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


def _expand(p: str) -> str:
    return os.path.expanduser(p)


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


class HostLink:
    """How to reach one host: persistent, reconnecting, with host keys always checked.

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
        # the host's payload cache (`_boot`): payloads this link sent to be kept, and until
        # when the cache is not asked after it failed to keep one
        self._kept: set[str] = set()
        self._cache_broken_until = 0.0

    async def __aenter__(self) -> HostLink:
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
        return hostport(real, port) if real == h.address else f"{h.address} ({hostport(real, port)})"

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
        """asyncssh.connect() options for this host (known_hosts, keys, timeouts, keepalive);
        actions that open a connection of their own (bulk copies) start from these."""
        h = self.host
        kh = _expand(h.known_hosts)
        opts: dict[str, Any] = {
            # a fresh controller has no known_hosts yet: nothing is trusted, nothing fails
            "known_hosts": kh if os.path.exists(kh) else asyncssh.import_known_hosts(""),
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

    def _auth_inputs(self) -> tuple[Any, ...]:
        """What a refused login could be fixed by: the fleet-file entry, the key files, the
        ssh config and the agent."""
        keys = self.host.client_keys or ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
        files = [_expand(k) for k in keys] + [_expand("~/.ssh/config")]
        return (self.host, os.environ.get("SSH_AUTH_SOCK"),
                *(_file_stamp(p) for p in files), *(_file_stamp(p + ".pub") for p in files))

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
                    raise HostError(self.name, f"{last.message} (not retried until the key files, "
                                    "~/.ssh/config or the fleet file change, or in "
                                    f"{self._retry_at - now:.0f}s)", last.code)
            elif last is not None and now < self._retry_at:
                raise HostError(self.name, f"{last.message} (next retry in {self._retry_at - now:.0f}s)",
                                last.code)
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
                raise HostError(self.name, f"key file {k} does not exist (client_keys in the fleet file)",
                                "key-file")
        try:
            return await asyncio.wait_for(asyncssh.connect(h.address, **opts), h.connect_timeout + 1)
        except asyncssh.HostKeyNotVerifiable:
            return await self._unverified_key(opts)
        except TimeoutError:
            raise HostError(self.name, f"connection to {self.where} timed out after {h.connect_timeout:g}s",
                            "timeout") from None
        except asyncssh.PermissionDenied as e:
            user = h.user or self._user or "the default user"
            raise HostError(self.name, f"authentication refused by {self.where} for {user}: {e.reason}",
                            "auth") from None
        except (asyncssh.KeyImportError, ValueError) as e:
            # asyncssh reads the key files before connecting: "Public key mismatch" means
            # id_x.pub is not the public half of id_x
            if isinstance(e, ValueError) and "key" not in str(e).lower():
                raise HostError(self.name, f"cannot connect to {self.where}: {e}", "unreachable") from None
            raise HostError(self.name, f"{self._bad_key()} cannot be used: {e}", "key-file") from None
        except asyncssh.DisconnectError as e:
            raise HostError(self.name, f"{self.where} disconnected: {e.reason}", "disconnected") from None
        except OSError as e:
            raise HostError(self.name, f"cannot connect to {self.where}: {_os_reason(e)}", "unreachable") from None

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
            key = await asyncio.wait_for(asyncssh.get_server_host_key(real, port), h.connect_timeout + 1)
        except (TimeoutError, OSError, asyncssh.Error) as e:
            raise HostError(self.name, f"host key of {self.where} not verifiable and not readable: {e}",
                            "host-key") from None
        if key is None:
            raise HostError(self.name, f"host key of {self.where} could not be read", "host-key")
        fp = key.get_fingerprint("sha256")
        kh_path = _expand(h.known_hosts)
        if known_hosts.keys_for(kh_path, real, port):
            raise HostError(self.name, f"host key of {self.where} CHANGED: it now presents {key.get_algorithm()} "
                            f"{fp}, which does not match {h.known_hosts}; refusing (remove the old entry only if "
                            "you know why it changed)", "host-key-changed")
        if not h.accept_new_host_keys:
            raise HostError(self.name, f"host key of {self.where} is unknown: {key.get_algorithm()} {fp} "
                            f"is not in {h.known_hosts}; refusing (verify it, then add it, or set "
                            "accept_new_host_keys = true)", "host-key-unknown")
        known_hosts.append_entry(kh_path, f"{known_hosts.entry_name(real, port)} "
                           f"{key.export_public_key('openssh').decode().strip()}\n")
        opts = dict(opts, known_hosts=kh_path)
        try:
            return await asyncio.wait_for(asyncssh.connect(h.address, **opts), h.connect_timeout + 1)
        except asyncssh.PermissionDenied as e:
            raise HostError(self.name, f"trusted the new host key {fp} of {self.where}, then authentication "
                            f"was refused: {e.reason}", "auth") from None
        except (TimeoutError, asyncssh.Error, OSError) as e:
            raise HostError(self.name, f"connection to {self.where} failed after trusting new key {fp}: {e}",
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
                  timeout: float | None = None, limit: int = OUTPUT_LIMIT) -> CommandResult:
        """Run argv on the host (no shell interpretation of its items); bytes in and out.

        Bounded: `timeout` is for the whole command (start, input, output and exit together);
        stdout past `limit` bytes is refused (HostError `answer-too-large`) and the command is
        stopped; of stderr only the last STDERR_KEEP bytes are kept."""
        timeout = self.host.command_timeout if timeout is None else timeout
        what = argv[2] if argv[:1] == ["env"] and len(argv) > 2 else argv[0]
        if self.is_local:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
            try:
                out, err = await asyncio.wait_for(_exchange(proc, input, limit, what), timeout)
                await asyncio.wait_for(proc.wait(), timeout)
            except BaseException as e:
                # timed out, too much output, or cancelled (a sibling failed first, the loop is
                # closing): the process group is killed and reaped here, never left unwatched
                if proc.returncode is None:
                    try:
                        os.killpg(proc.pid, 9)
                    except OSError:
                        proc.kill()
                    await proc.wait()
                if isinstance(e, TimeoutError):
                    raise HostError(self.name, f"{what} timed out after {timeout:g}s", "timeout") from None
                if isinstance(e, AnswerTooLarge):
                    raise HostError(self.name, str(e), "answer-too-large") from None
                raise
            return CommandResult(proc.returncode or 0, out, err)
        conn = await self.connection()
        proc = None
        try:
            proc = await conn.create_process(self._remote_command(argv), encoding=None)
            out, err = await asyncio.wait_for(_exchange(proc, input, limit, what), timeout)
            await asyncio.wait_for(proc.wait_closed(), timeout)
        except TimeoutError:
            if proc is not None:
                proc.close()  # the channel goes, and a tied helper with it (WATCHDOG)
            raise HostError(self.name, f"{what} timed out after {timeout:g}s", "timeout") from None
        except AnswerTooLarge as e:
            if proc is not None:
                proc.close()
            raise HostError(self.name, str(e), "answer-too-large") from None
        except (asyncssh.Error, OSError) as e:
            self.drop()
            raise HostError(self.name, f"connection lost: {e}", "disconnected") from None
        except BaseException:
            # cancelled (a sibling failed first, or the loop is closing): the channel goes, and a
            # tied helper with it, as after a timeout; the connection itself lives on
            if proc is not None:
                proc.close()
            raise
        rc = proc.exit_status if proc.exit_status is not None else 255
        return CommandResult(rc, out or b"", err or b"")

    async def run_helper(self, source: str, payload: Any, timeout: float | None = None,
                         what: str = "helper") -> Any:
        """Run a stdlib helper with `payload` as JSON on stdin; its one JSON answer on stdout.
        HostError `shell-output` when the login shell printed text ahead of the answer,
        `helper` (with the helper's whole stderr, bounded) when there is no answer. A bundled
        helper the host's payload cache lacks is sent whole in a second run."""
        request = json.dumps(payload).encode()
        first, resend, sha = self._boot(source)
        # tied: a helper cut off by the timeout dies on the host with its channel
        argv = helper_argv(self.host.python, ["--tied"], self.host.become)
        res = await self.run(argv, input=first + request, timeout=timeout)
        if resend is not None and is_missing(res.stdout.rstrip(b"\n").rpartition(b"\n")[2], sha):
            res = await self.run(argv, input=resend() + request, timeout=timeout)
        try:
            return loads(res.stdout)
        except ValueError:
            pass
        lines = res.stdout.rstrip(b"\n").split(b"\n")
        if len(lines) > 1:
            try:
                loads(lines[-1])
            except ValueError:
                pass
            else:
                raise HostError(self.name, noise_text(b"\n".join(lines[:-1]), what), "shell-output")
        err = bounded_text(res.stderr)
        refused = sudo_error(self.host, err)
        if refused is not None:
            raise refused
        if not err:
            out = shown(res.stdout.decode("utf-8", "replace").strip()[:300])
            err = f"exit status {res.returncode}, " + (f"output: {out}" if out else "no output")
        raise HostError(self.name, f"{what} failed: {err}", "helper")

    async def start_helper(self, source: str, args: list[str] | None = None,
                           what: str = "helper") -> HelperProcess:
        """Start a resident helper; its source is already sent, the streams are yours."""
        argv = helper_argv(self.host.python, args, self.host.become)

        async def spawn() -> Any:
            if self.is_local:
                return await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=ANSWER_LIMIT)
            conn = await self.connection()
            try:
                return await conn.create_process(self._remote_command(argv), encoding=None)
            except (asyncssh.Error, OSError) as e:
                self.drop()
                raise HostError(self.name, f"connection lost: {e}", "disconnected") from None

        proc = await spawn()
        try:
            return await self._started(HelperProcess, proc, not self.is_local, what, source, spawn)
        except BaseException:
            # cancelled (or failed) while its source was being sent: nobody holds the process
            # yet, so it is stopped here rather than left running unwatched
            HelperProcess(proc, not self.is_local, what).close()
            raise

    async def _started(self, cls: Any, proc: Any, remote: bool, what: str, source: str,
                       spawn: Any, *extra: Any) -> HelperProcess:
        """Send helper `source` to a started BOOT (by name when the host may have it cached,
        with `spawn` to start it again and send it whole when it has not)."""
        first, resend, sha = self._boot(source)

        async def again() -> Any:
            assert resend is not None
            new = await spawn()
            try:
                new.stdin.write(resend())
                await new.stdin.drain()
            except BaseException:
                # cancelled while the payload was being sent: the new process is nobody's yet
                HelperProcess(new, remote, what).close()
                raise
            return new

        helper = cls(proc, remote, what, *extra, resend=again if resend else None, sha256=sha)
        helper.stdin.write(first)
        await helper.stdin.drain()
        return helper

    def _boot(self, source: str) -> tuple[bytes, Any, str | None]:
        """(what starts helper `source` on BOOT, a function giving what sends it whole when
        the host's cache lacks it or None, its sha256). A bundled helper goes by name while
        the fleet file's `payload_cache` is on and this host's cache has not failed to keep
        it; other source text goes as it is."""
        p = payload_for(source)
        if p is None:
            return helper_stdin(source), None, None
        if not self.host.payload_cache:
            return payload_stdin(p, cached=False, keep=False), None, p.sha256
        now = time.monotonic()
        if now < self._cache_broken_until:
            return payload_stdin(p, cached=False, keep=False), None, p.sha256
        sent_before = p.sha256 in self._kept

        def resend() -> bytes:
            # a miss after this link had it kept there: the host cannot keep it (an unwritable
            # or untrusted folder), so for a while it is sent whole without asking
            if sent_before:
                self._cache_broken_until = time.monotonic() + CACHE_RETRY
            self._kept.add(p.sha256)
            return payload_stdin(p, cached=False, keep=True)

        return payload_stdin(p, cached=True), resend, p.sha256


    async def transfer_helper(self, source: str, args: list[str] | None = None,
                              what: str = "helper") -> HelperProcess:
        """Start a helper for a bulk byte stream (mirror's reader and writer).

        Over SSH it runs on a connection of its own, so polls on the shared connection are
        not queued behind the stream, with AES-GCM preferred and a 16 MiB receive window:
        relaying 1 GiB here (2 cores) took ~130 MB/s on a default channel (2 MiB window,
        chacha20-poly1305) and ~300 MB/s on this one. Host keys are checked as for
        `connection()`; when that connection cannot be made, the shared one carries the
        stream. Closing the helper closes its connection. A `local` host gets `start_helper`.
        """
        if self.is_local:
            return await self.start_helper(source, args, what=what)
        opts = {**self.connect_options(), "encryption_algs": TRANSFER_CIPHERS}
        own: asyncssh.SSHClientConnection | None
        try:
            own = await asyncio.wait_for(asyncssh.connect(self.host.address, **opts),
                                         self.host.connect_timeout + 1)
        except (asyncssh.Error, OSError, TimeoutError):
            own = None
        conn = own if own is not None else await self.connection()
        argv = helper_argv(self.host.python, args, self.host.become)

        async def spawn() -> Any:
            try:
                return await conn.create_process(self._remote_command(argv), encoding=None,
                                                 window=TRANSFER_WINDOW, max_pktsize=TRANSFER_PKTSIZE)
            except (asyncssh.Error, OSError) as e:
                if own is not None:
                    own.close()
                else:
                    self.drop()
                raise HostError(self.name, f"connection lost: {e}", "disconnected") from None

        proc = await spawn()
        return await self._started(_TransferHelper, proc, True, what, source, spawn, own)


async def _exchange(proc: Any, input: bytes | None, limit: int, what: str) -> tuple[bytes, bytes]:
    """Send `input` (then end of file) and read stdout (at most `limit` bytes) and stderr (its
    last STDERR_KEEP bytes) together: a command that writes much to one while the other is
    read never blocks."""

    async def feed() -> None:
        if proc.stdin is None:
            return
        try:
            if input:
                proc.stdin.write(input)
                await proc.stdin.drain()
            proc.stdin.write_eof() if hasattr(proc.stdin, "write_eof") else proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it stopped reading; what it said tells why

    out, err, _ = await asyncio.gather(read_bounded(proc.stdout, limit, what),
                                       read_bounded(proc.stderr, STDERR_KEEP, what, keep_tail=True),
                                       feed())
    return out, err


class _TransferHelper(HelperProcess):
    """A helper on a connection of its own (`HostLink.transfer_helper`), closed with it."""

    def __init__(self, proc: Any, remote: bool, what: str, own: Any, **kw: Any) -> None:
        super().__init__(proc, remote=remote, what=what, **kw)
        self._own = own

    def close(self) -> None:
        super().close()
        if self._own is not None:
            self._own.close()


TRANSFER_CIPHERS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
                    "chacha20-poly1305@openssh.com", "aes128-ctr", "aes256-ctr"]
TRANSFER_WINDOW = 16 * 1024 * 1024
TRANSFER_PKTSIZE = 256 * 1024
