"""A command's run on a host, the part both kinds of link share: what it returned
(`CommandResult`), its input fed and its two outputs read together and bounded (`exchange`),
and the whole run of one on the `local` host (`run_local`). `HostLink.run` runs it over SSH."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link import localproc
from fleetdeck.backend.fleet.link.channel import STDERR_KEEP, AnswerTooLarge, read_bounded


@dataclass(frozen=True)
class CommandResult:
    """What a command on a host returned."""

    returncode: int
    stdout: bytes
    stderr: bytes


async def exchange(proc: Any, input: bytes | None, limit: int, what: str) -> tuple[bytes, bytes]:
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

    out, err, _ = await asyncio.gather(
        read_bounded(proc.stdout, limit, what),
        read_bounded(proc.stderr, STDERR_KEEP, what, keep_tail=True),
        feed(),
    )
    return out, err


async def run_local(
    name: str, argv: list[str], input: bytes | None, timeout: float, limit: int, what: str
) -> CommandResult:
    """`HostLink.run` on the `local` host (`name`): argv as a process group of its own, bounded
    as on a remote host; killed and reaped when it times out, answers too much or is
    cancelled."""
    proc = await localproc.spawn(argv, stdin=input is not None)
    try:
        async with asyncio.timeout(timeout):
            out, err = await exchange(proc, input, limit, what)
            await proc.wait()
    except BaseException as e:
        # timed out, too much output, or cancelled (a sibling failed first, the loop is
        # closing): the process group is killed and reaped here (bounded), never left
        # unwatched
        await proc.reap()
        proc.close()
        if isinstance(e, TimeoutError):
            raise HostError(name, f"{what} timed out after {timeout:g}s", "timeout") from None
        if isinstance(e, AnswerTooLarge):
            raise HostError(name, str(e), "answer-too-large") from None
        raise
    return CommandResult(proc.returncode or 0, out, err)


__all__ = ["CommandResult", "exchange", "run_local"]
