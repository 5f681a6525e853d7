"""Links to hosts: one persistent asyncssh connection per remote host, a subprocess for `local`.

Everything that runs on a host is either a fixed argv (quoted with shlex for the remote shell)
or a stdlib Python helper whose source and JSON input travel on stdin: no untrusted string is
ever pasted into a shell command. What a command returned and how its output is read are in
command.py; the errors a helper ends with, in helper_errors.py.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from typing import Any

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HostError, answer_or_raise
from fleetdeck.backend.fleet.link import localproc
from fleetdeck.backend.fleet.link.boot import helper_argv, helper_stdin, payload_stdin
from fleetdeck.backend.fleet.link.bundle import payload_for
from fleetdeck.backend.fleet.link.channel import (
    ANSWER_LIMIT,
    OUTPUT_LIMIT,
    AnswerTooLarge,
    HelperProcess,
    TooDeep,
    bounded_text,
    is_missing,
    loads,
    noise_text,
)
from fleetdeck.backend.fleet.link.command import CommandResult, exchange, run_local
from fleetdeck.backend.fleet.link.connect import (
    Connector,
)
from fleetdeck.backend.fleet.link.helper_errors import ended_error, sudo_error
from fleetdeck.backend.fleet.link.sshlib import asyncssh
from fleetdeck.backend.host.lib.text import shown

# After a host's payload cache failed to keep a payload, it is sent whole for this long before
# the cache is tried again (it may have been a full disk).
CACHE_RETRY = 600.0


class HostLink(Connector):
    """One host and what runs there: commands (`run`), one-shot helpers (`call`, `run_helper`),
    resident and bulk-stream helpers (`start_helper`, `transfer_helper`). `host` is its
    fleet-file entry, so an action needs the link alone.

    Connecting (persistent, reconnecting with backoff, host keys always checked) is
    `Connector`'s, in connect.py. An async context manager: `async with HostLink(cfg) as
    link:` closes the connection at the end.
    """

    def __init__(self, host: HostConfig) -> None:
        super().__init__(host)
        # the host's payload cache (`_boot`): payloads this link sent to be kept, and until
        # when the cache is not asked after it failed to keep one
        self._kept: set[str] = set()
        self._cache_broken_until = 0.0

    # -- running things ----------------------------------------------------------------------
    def _remote_command(self, argv: list[str]) -> str:
        return shlex.join(argv)

    async def run(
        self,
        argv: list[str],
        input: bytes | None = None,
        timeout: float | None = None,
        limit: int = OUTPUT_LIMIT,
    ) -> CommandResult:
        """Run argv on the host (no shell interpretation of its items); bytes in and out.

        Bounded: `timeout` is for the whole command (start, input, output and exit together);
        stdout past `limit` bytes is refused (HostError `answer-too-large`) and the command is
        stopped; of stderr only the last STDERR_KEEP bytes are kept."""
        timeout = self.host.command_timeout if timeout is None else timeout
        what = argv[2] if argv[:1] == ["env"] and len(argv) > 2 else argv[0]
        if self.is_local:
            return await run_local(self.name, argv, input, timeout, limit, what)
        conn = await self.connection()  # bounded by the connect timeout
        chan = None
        try:
            # the whole command, its start included: a host that accepted the connection and
            # went silent does not confirm the channel either
            async with asyncio.timeout(timeout):
                chan = await conn.create_process(self._remote_command(argv), encoding=None)
                out, err = await exchange(chan, input, limit, what)
                await chan.wait_closed()
        except TimeoutError:
            if chan is not None:
                chan.close()  # the channel goes, and a tied helper with it (boot.WATCHDOG)
            else:
                self.drop()  # not even a channel in that time: the connection is dead
            raise HostError(self.name, f"{what} timed out after {timeout:g}s", "timeout") from None
        except AnswerTooLarge as e:
            if chan is not None:
                chan.close()
            raise HostError(self.name, str(e), "answer-too-large") from None
        except (asyncssh.Error, OSError) as e:
            self.drop()
            raise HostError(self.name, f"connection lost: {e}", "disconnected") from None
        except BaseException:
            # cancelled (a sibling failed first, or the loop is closing): the channel goes, and a
            # tied helper with it, as after a timeout; the connection itself lives on. Nothing
            # of the host is awaited after a cancellation.
            if chan is not None:
                chan.close()
            raise
        rc = chan.exit_status if chan.exit_status is not None else 255
        return CommandResult(rc, out or b"", err or b"")

    async def run_helper(
        self, source: str, payload: Any, timeout: float | None = None, what: str = "helper"
    ) -> Any:
        """Run a stdlib helper with `payload` as JSON on stdin; its one JSON answer on stdout.
        HostError `shell-output` when the login shell printed text ahead of the answer,
        `helper` (with the helper's whole stderr, bounded) when there is no answer. A bundled
        helper the host's payload cache lacks is sent whole in a second run."""
        request = json.dumps(payload).encode()
        first, resend, sha = self._boot(source)
        # tied: a helper cut off by the timeout dies on the host with its channel
        argv = helper_argv(self.host.python, ["--tied"], self.host.become, self.is_local)
        res = await self.run(argv, input=first + request, timeout=timeout)
        if resend is not None and is_missing(res.stdout.rstrip(b"\n").rpartition(b"\n")[2], sha):
            res = await self.run(argv, input=resend() + request, timeout=timeout)
        try:
            return loads(res.stdout, what=f"the {what}'s answer")
        except TooDeep as e:
            raise HostError(self.name, str(e), TooDeep.code) from None
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

    async def call(
        self,
        helper: str,
        op: str,
        /,
        *,
        within: float | None = None,
        what: str = "helper",
        **fields: Any,
    ) -> dict[str, Any]:
        """Ask `helper` (a bundled helper's module, or source text) for `op` with `fields` as
        the rest of the request, in one run (`run_helper`, bounded by `within` seconds, the
        host's command_timeout by default): its answer when it says `"ok": true`.
        HelperError (a HostError) with the helper's own code and message when it answered
        with its error shape, or with what is not an answer object (code `helper`); any other
        HostError as from `run_helper` when the host could not be asked or gave no answer."""
        answer = await self.run_helper(helper, {"op": op, **fields}, timeout=within, what=what)
        return answer_or_raise(self.name, answer)

    async def start_helper(
        self,
        source: str,
        args: list[str] | None = None,
        what: str = "helper",
        within: float | None = None,
    ) -> HelperProcess:
        """Start a resident helper; its source is already sent, the streams are yours.

        Bounded: connecting, opening its channel and sending its source take at most `within`
        seconds (the host's connect and command timeouts together by default); past them
        HostError `timeout`, and the connection is dropped (a host that accepted it and went
        silent answers on it no more). Cancelled at any point, it stops what it started and
        awaits nothing of the host."""
        argv = helper_argv(self.host.python, args, self.host.become, self.is_local)
        within = self.host.connect_timeout + self.host.command_timeout if within is None else within

        async def spawn() -> Any:
            if self.is_local:
                return await localproc.spawn(argv, limit=ANSWER_LIMIT)
            conn = await self.connection()
            try:
                return await conn.create_process(self._remote_command(argv), encoding=None)
            except (asyncssh.Error, OSError) as e:
                self.drop()
                raise HostError(self.name, f"connection lost: {e}", "disconnected") from None

        proc = None
        try:
            async with asyncio.timeout(within):
                proc = await spawn()
                return await self._started(
                    HelperProcess, proc, not self.is_local, what, source, spawn
                )
        except BaseException as e:
            # cancelled, timed out or failed while it started: nobody holds the process yet, so
            # it is stopped here rather than left running unwatched
            helper = HelperProcess(proc, not self.is_local, what) if proc is not None else None
            if isinstance(e, TimeoutError):
                if helper is not None:
                    helper.close()
                if not self.is_local:
                    self.drop()
                raise HostError(
                    self.name,
                    f"no answer: the {what} could not be started within {within:g}s",
                    "timeout",
                ) from None
            if helper is not None and isinstance(e, (BrokenPipeError, ConnectionError)):
                # it ended before its source was sent (no sudo, no python): its stderr says why
                # (read for at most 2 s)
                try:
                    why = await ended_error(self.host, helper, e, what)
                finally:
                    helper.close()
                raise why from None
            if helper is not None:
                helper.close()
            raise

    async def _started(
        self, cls: Any, proc: Any, remote: bool, what: str, source: str, spawn: Any, *extra: Any
    ) -> HelperProcess:
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

    async def transfer_helper(
        self, source: str, args: list[str] | None = None, what: str = "helper"
    ) -> HelperProcess:
        """Start a helper for a bulk byte stream (mirror's reader and writer).

        Over SSH it runs on a connection of its own, so polls on the shared connection are
        not queued behind the stream, with a 16 MiB receive window (AES-GCM is preferred on
        every connection, `connect.CIPHERS`):
        relaying 1 GiB here (2 cores) took ~130 MB/s on a default channel (2 MiB window,
        chacha20-poly1305) and ~300 MB/s on this one. Host keys are checked as for
        `connection()`; when that connection cannot be made, the shared one carries the
        stream. Closing the helper closes its connection. A `local` host gets `start_helper`.
        """
        if self.is_local:
            return await self.start_helper(source, args, what=what)
        opts = self.connect_options()
        own: asyncssh.SSHClientConnection | None
        try:
            async with asyncio.timeout(self.host.connect_timeout + 1):
                own = await asyncssh.connect(self.host.address, **opts)
        except (asyncssh.Error, OSError, TimeoutError):
            own = None
        conn = own if own is not None else await self.connection()
        argv = helper_argv(self.host.python, args, self.host.become, self.is_local)

        async def spawn() -> Any:
            try:
                return await conn.create_process(
                    self._remote_command(argv),
                    encoding=None,
                    window=TRANSFER_WINDOW,
                    max_pktsize=TRANSFER_PKTSIZE,
                )
            except (asyncssh.Error, OSError) as e:
                if own is not None:
                    own.close()
                else:
                    self.drop()
                raise HostError(self.name, f"connection lost: {e}", "disconnected") from None

        within = self.host.connect_timeout + self.host.command_timeout
        proc = None
        try:
            async with asyncio.timeout(within):
                proc = await spawn()
                return await self._started(_TransferHelper, proc, True, what, source, spawn, own)
        except BaseException as e:
            # as in start_helper: what was started is stopped, nothing of the host awaited
            if proc is not None:
                proc.close()
            if own is not None:
                own.close()
            if isinstance(e, TimeoutError):
                if own is None:
                    self.drop()
                raise HostError(
                    self.name,
                    f"no answer: the {what} could not be started within {within:g}s",
                    "timeout",
                ) from None
            raise


class _TransferHelper(HelperProcess):
    """A helper on a connection of its own (`HostLink.transfer_helper`), closed with it."""

    def __init__(self, proc: Any, remote: bool, what: str, own: Any, **kw: Any) -> None:
        super().__init__(proc, remote=remote, what=what, **kw)
        self._own = own

    def close(self) -> None:
        super().close()
        if self._own is not None:
            self._own.close()


TRANSFER_WINDOW = 16 * 1024 * 1024
TRANSFER_PKTSIZE = 256 * 1024
