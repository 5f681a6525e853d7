"""Processes on the `local` host, started so that every await on them can be cancelled.

asyncio's own `create_subprocess_exec` (Python 3.11 to 3.13) cannot always be: cancelled
while it connects the child's pipes, together with the task connecting them (as the event
loop does with every task when it closes), it waits for the child's end for ever, its pipes
never counted as closed (CPython gh-103847, gh-125502). A dashboard quitting during a poll
hung so. Here the child is started with `subprocess.Popen` (which asyncio calls too), each
pipe is connected on its own (one turn of the loop; a cancelled connection closes itself),
and the child's end is read from a pidfd: no await waits on another task, and a cancellation
never leaves a child running unwatched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from asyncio.streams import FlowControlMixin
from typing import Any

#: a clean-up step (reaping a child that was just killed) is awaited at most this long
CLEANUP_WITHIN = 2.0


class _WriteProtocol(FlowControlMixin, asyncio.Protocol):
    """The protocol of a child's stdin: flow control for `StreamWriter.drain`."""

    def __init__(self) -> None:
        super().__init__()
        self._closed = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: Any) -> asyncio.Future:
        return self._closed


class LocalProcess:
    """A child in a session of its own, with asyncio streams for the pipes it was given:
    `stdin` (a StreamWriter, or None), `stdout` and `stderr` (StreamReaders)."""

    def __init__(
        self,
        popen: subprocess.Popen,
        stdin: asyncio.StreamWriter | None,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._transports = transports

    @property
    def returncode(self) -> int | None:
        """Its exit status once it ended (it is reaped then), else None."""
        return self._popen.poll()

    def kill(self) -> None:
        """SIGKILL to its whole session (its own children too), if it still runs; it is
        reaped soon after from loop callbacks (`wait` or `reap` reap it at once)."""
        if self._popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                with contextlib.suppress(OSError):
                    self._popen.kill()
            _reap_later(self._popen)

    async def wait(self) -> int:
        """Its exit status, once it ended. Cancellable at any point (nothing is left behind)."""
        rc = self._popen.poll()
        if rc is not None:
            return rc
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            fd = None
        if fd is None:  # a kernel without pidfds: look again every 20 ms
            while (rc := self._popen.poll()) is None:
                await asyncio.sleep(0.02)
            return rc
        loop = asyncio.get_running_loop()
        ended = loop.create_future()

        def _readable() -> None:
            if not ended.done():
                ended.set_result(None)

        loop.add_reader(fd, _readable)
        try:
            await ended
            while (rc := self._popen.poll()) is None:  # readable means it ended: at once
                await asyncio.sleep(0.005)
            return rc
        finally:
            loop.remove_reader(fd)
            os.close(fd)

    async def reap(self, within: float = CLEANUP_WITHIN) -> None:
        """Kill it and wait for its end, at most `within` seconds (a child stuck in the kernel
        is left to `subprocess`'s own reaping); never raises but on cancellation."""
        self.kill()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self.wait()

    def close(self) -> None:
        """Close its pipes (after it was killed: what it wrote is not read any more)."""
        for t in self._transports:
            t.close()


async def spawn(
    argv: list[str],
    *,
    stdin: bool = True,
    limit: int = 1 << 16,
    env: dict[str, str] | None = None,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
) -> LocalProcess:
    """Start `argv` in a session of its own with pipes for stdout and stderr (and stdin when
    `stdin`, else /dev/null); `stdout` or `stderr` may instead be what `subprocess.Popen`
    takes (a file, `DEVNULL`), and its reader is then empty. OSError as from
    `subprocess.Popen` when it cannot start. Cancelled while its pipes are being connected,
    the child is killed and its pipes closed before the cancellation goes on; nothing is
    awaited then."""
    loop = asyncio.get_running_loop()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        bufsize=0,
        start_new_session=True,
        env=env,
    )
    transports: list[asyncio.BaseTransport] = []
    try:
        writer = None
        if popen.stdin is not None:
            wt, wp = await loop.connect_write_pipe(_WriteProtocol, popen.stdin)
            transports.append(wt)
            writer = asyncio.StreamWriter(wt, wp, None, loop)
        readers = []
        for pipe in (popen.stdout, popen.stderr):
            reader = asyncio.StreamReader(limit=limit, loop=loop)
            readers.append(reader)
            if pipe is None:  # not a pipe here: nothing to read
                reader.feed_eof()
                continue
            rt, _ = await loop.connect_read_pipe(
                functools.partial(asyncio.StreamReaderProtocol, reader, loop=loop), pipe
            )
            transports.append(rt)
    except BaseException:
        proc = LocalProcess(popen, None, asyncio.StreamReader(), asyncio.StreamReader(), transports)
        proc.kill()
        proc.close()
        for f in (popen.stdin, popen.stdout, popen.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        raise
    return LocalProcess(popen, writer, readers[0], readers[1], transports)


def _reap_later(popen: subprocess.Popen, tries: int = 200) -> None:
    """Reap a killed child from loop callbacks (no task: nothing for a closing loop to wait
    for); after `tries` looks 50 ms apart it is left to `subprocess`'s own reaping."""
    if popen.poll() is not None or tries <= 0:
        return
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop().call_later(0.05, _reap_later, popen, tries - 1)
