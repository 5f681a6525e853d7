"""The relay between the two helpers of a copy: the state of one copy, every step bounded in
time (no-progress limits and the whole copy's deadline), and the frames forwarded from the
source's reader to the destination's writer with their trailers (`copy.py` starts the helpers,
judges and cleans up; this module moves the bytes)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from fleetdeck.backend.actions.mirror.common import (
    HASH_RATE,
    HELPER,
    MIN_RATE,
    PER_FILE,
    MirrorFail,
    Progress,
    gib,
)
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.channel import HelperProcess, ShellOutputError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.link.sshlib import asyncssh
from fleetdeck.backend.host.lib.text import shown


def fail_from(link: HostLink, answer: dict, tail: str = "") -> MirrorFail:
    e = HelperError.of(link.name, answer)
    return MirrorFail(e.code, f"{link.name}: {shown(e.message)}{tail}")


class Relay:
    """One copy's helpers and the bounded relay between them.

    No wait is unbounded: every read from the reader and every drain towards the writer must
    move bytes within the host's `command_timeout` (a stopped reader or writer, a stuck disk
    and a silent connection all end there), and the copy as a whole has a deadline that grows
    with its bytes and its file count. The helpers carry their own no-progress timeout too
    (`Watchdog` in host/mirror/common.py), for a controller that stops without closing anything."""

    def __init__(
        self,
        src_link: HostLink,
        src: dict,
        dst_link: HostLink,
        dst_path: str,
        follow: bool,
        progress: Progress | None,
        seen: dict[str, Any],
        swap: dict[str, Any] | None = None,
    ) -> None:
        self.src_link, self.src, self.dst_link, self.dst_path = src_link, src, dst_link, dst_path
        self.swap = swap
        self.dst_abs: str | None = None
        #: after a failed replace: the kept name, when DST's host says the original is there
        self.kept_as: str | None = None
        self.follow, self.progress, self.seen = follow, progress, seen
        self.files = src["files"]
        self.total = sum(f["bytes"] for f in self.files)
        self.s_idle = float(src_link.host.command_timeout)
        self.d_idle = float(dst_link.host.command_timeout)
        # the helpers give up later than this side notices, so the stalled side gets named
        self.helper_idle = 2 * max(self.s_idle, self.d_idle) + 5
        self.settle = self.total / HASH_RATE + len(self.files) * PER_FILE
        self.limit = 2 * max(self.s_idle, self.d_idle) + self.total / MIN_RATE + self.settle
        self.deadline = time.monotonic() + self.limit
        self.reader: HelperProcess | None = None
        self.writer: HelperProcess | None = None
        self.writer_said: asyncio.Future | None = None
        self.r_id: tuple[Any, Any] | None = None  # (pid, start) as the helper said them
        self.w_id: tuple[Any, Any] | None = None
        self.partial: str | None = None
        self.committed = False
        self.cleaned: str | None = None
        #: the writer said it removed its partial folder (with its refusal)
        self.writer_removed = False

    def _writer_fail(self, answer: dict) -> MirrorFail:
        """The writer's refusal; whether it removed its partial folder itself is kept for the
        cleanup (once the destination's parent is a link, only the writer can tell)."""
        err = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(err, dict) and err.get("partial_removed"):
            self.writer_removed = True
        return fail_from(self.dst_link, answer)

    # -- bounded steps ----------------------------------------------------------------------
    def _stalled(self, side: str, what: str, secs: float) -> HostError:
        link = self.src_link if side == "source" else self.dst_link
        if time.monotonic() >= self.deadline:
            return HostError(
                link.name,
                f"the copy took longer than its limit of {self.limit:.0f}s "
                f"({gib(self.total)} in {len(self.files)} files); it was stopped",
                "timeout",
            )
        return HostError(
            link.name,
            f"the {side} stalled: {what} for {secs:g}s (a stopped "
            "process, a stuck disk or a silent connection); the copy was stopped",
            "timeout",
        )

    def _budget(self, idle: float) -> float:
        return max(0.0, min(idle, self.deadline - time.monotonic()))

    async def _bounded(self, aw: Any, side: str, what: str, idle: float) -> Any:
        t = self._budget(idle)
        try:
            async with asyncio.timeout(t):
                return await aw
        except TimeoutError:
            raise self._stalled(side, what, t) from None

    async def _send(self, h: HelperProcess, obj: Any, side: str) -> None:
        idle = self.s_idle if side == "source" else self.d_idle
        await self._bounded(h.send_json(obj), side, "its helper took no input", idle)

    async def _answer(self, h: HelperProcess, side: str, what: str, idle: float) -> dict:
        link = self.src_link if side == "source" else self.dst_link
        return await self._bounded(recv_answer(h, link, None), side, what, idle)

    async def _start(self, link: HostLink, side: str) -> HelperProcess:
        try:
            return await self._bounded(
                link.transfer_helper(HELPER),
                side,
                "starting its helper",
                link.host.connect_timeout + link.host.command_timeout,
            )
        except (asyncssh.Error, OSError) as e:
            raise HostError(link.name, f"connection lost: {e}", "disconnected") from None

    async def _pull(self, aw: Any) -> Any:
        """Bytes from the reader, within the no-progress limit; a stream that ended is the
        source's (its host or its connection went away)."""
        try:
            return await self._bounded(aw, "source", "its reader sent nothing", self.s_idle)
        except (asyncio.IncompleteReadError, ConnectionError, asyncssh.Error) as e:
            raise HostError(
                self.src_link.name,
                f"the source's stream ended during the copy ({type(e).__name__})",
                "disconnected",
            ) from None

    async def _push(self) -> None:
        """Wait until the writer took what was written, within the no-progress limit; a
        stream that broke is the destination's, with the writer's last word if it said one."""
        assert self.writer is not None
        try:
            await self._bounded(
                self.writer.stdin.drain(), "destination", "its writer took nothing", self.d_idle
            )
        except (ConnectionError, asyncssh.Error) as e:
            said = await last_word(self.writer_said)
            if said is not None and not said.get("ok"):
                raise self._writer_fail(said) from None
            raise HostError(
                self.dst_link.name,
                f"the destination's stream ended during the copy ({type(e).__name__})",
                "disconnected",
            ) from None

    async def _relay(self) -> list[dict]:
        """Forward frames from the reader to the writer; the source's trailer of each file."""
        assert self.reader is not None and self.writer is not None and self.writer_said is not None
        trailers = []
        src_out, dst_in = self.reader.stdout, self.writer.stdin
        if self.progress is not None:
            self.progress(0, self.total)
        for _ in self.files:
            while True:
                hdr = await self._pull(src_out.readexactly(4))
                dst_in.write(hdr)
                n = int.from_bytes(hdr, "big")
                if n == 0:
                    break
                dst_in.write(await self._pull(src_out.readexactly(n)))
                await self._push()
                if self.writer_said.done():
                    raise self._writer_fail(self.writer_said.result())
                self.seen["bytes"] += n
                if self.progress is not None:
                    self.progress(self.seen["bytes"], self.total)
            line = await self._pull(src_out.readline())
            if not line:
                raise HostError(
                    self.src_link.name, "the source's reader ended early", "disconnected"
                )
            try:
                t = json.loads(line)
            except ValueError:
                raise HostError(
                    self.src_link.name,
                    "the source's reader sent what is not a trailer; the stream is out of step",
                    "helper",
                ) from None
            if not t.get("ok"):
                raise fail_from(self.src_link, t)
            trailers.append(t)
            self.seen["files"] += 1
        return trailers


async def last_word(task: asyncio.Future | None) -> dict | None:
    """What the writer said before its stream broke (a disk-full error, say), if anything."""
    if task is None:
        return None
    try:
        async with asyncio.timeout(2):
            msg = await asyncio.shield(task)
    except (Exception, asyncio.CancelledError):
        return None
    return msg if isinstance(msg, dict) else None


async def recv_answer(h: HelperProcess, link: HostLink, timeout: float | None) -> dict:
    try:
        async with asyncio.timeout(timeout):
            msg = await h.recv_json()
    except ShellOutputError as e:  # a login shell that prints before the helper's answer
        raise HostError(link.name, str(e), "shell-output") from None
    except ValueError as e:
        raise HostError(
            link.name, f"mirror helper answered what is not JSON ({e})", "helper"
        ) from None
    except EOFError:
        err = (await h.read_stderr()).strip().splitlines()
        raise HostError(
            link.name, "mirror helper ended early" + (f": {err[-1]}" if err else ""), "disconnected"
        ) from None
    return (
        msg
        if isinstance(msg, dict)
        else {"ok": False, "error": {"code": "helper", "message": str(msg)[:200]}}
    )
