"""Mirror's copy engine: the reader and the writer helpers, the relay between them, the
budgets that bound every wait, and the cleanup after a failure (`mirror/main.py` decides whether
and what to copy; this module moves the bytes and proves them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncssh

from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.link.channel import HelperProcess, ShellOutputError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.mirror import main as mirror_helper

# the host side, bundled with the host library by HostLink
HELPER = mirror_helper.__name__
HASH_RATE = 50e6  # bytes/s assumed for timeouts only: slow disks still finish
# A whole copy may take command_timeout x 2 + its bytes at MIN_RATE + PER_FILE a file (open,
# fsync, hash); no-progress timeouts catch a stall long before that.
MIN_RATE = 256 * 1024
PER_FILE = 0.05
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class MirrorFile:
    """One file of the comparison: sizes and sha256 as each host computed them from its disk."""

    path: str
    bytes: int
    sha256_src: str | None
    sha256_dst: str | None
    #: copied | identical | mismatch | missing | extra
    status: str
    bytes_dst: int | None = None
    #: file | dir | symlink | special (what stands at `path` on the side that has it)
    kind: str = "file"


class MirrorFail(Exception):
    """A refusal or failure with its reason code; `before_copy`: nothing was created yet."""

    def __init__(
        self, reason: str, error: str, files: tuple[MirrorFile, ...] = (), before_copy: bool = False
    ) -> None:
        super().__init__(error)
        self.reason, self.error, self.files = reason, error, files
        self.before_copy = before_copy


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


# failures that happen during a copy (as opposed to refusals decided before it)
FAILED_DURING_COPY = {
    "disk-full",
    "write-failed",
    "source-changed",
    "read-failed",
    "mismatch",
    "disconnected",
    "dst-changed",
    "helper",
    "swap-failed",
    "unverified",
}


def overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _fail_from(link: HostLink, answer: dict, tail: str = "") -> MirrorFail:
    e = HelperError.of(link.name, answer)
    return MirrorFail(e.code, f"{link.name}: {shown(e.message)}{tail}")


async def copy_tree(
    src_link: HostLink,
    src: dict,
    dst_link: HostLink,
    dst_path: str,
    follow: bool,
    progress: Progress | None,
    seen: dict[str, Any],
    swap: dict[str, Any] | None = None,
) -> tuple[tuple[MirrorFile, ...], int | None, str | None]:
    """Stream every file through here into DST's partial folder; commit only if all matched.

    On any failure both helpers are stopped and the partial folder is removed (checked on
    the destination afterwards), and the error says so. `seen["bytes"]` counts what was
    relayed, for the report of a failed copy."""
    run = _Copy(src_link, src, dst_link, dst_path, follow, progress, seen, swap)
    try:
        return await run.go()
    except MirrorFail as e:
        note = await run.cleanup()
        seen["kept_as"] = run.kept_as
        raise MirrorFail(
            e.reason, f"{e.error}; {note}", e.files, before_copy=e.before_copy
        ) from None
    except HostError as e:
        note = await run.cleanup()
        seen["kept_as"] = run.kept_as
        raise HostError(e.host, f"{e.message}; {note}", e.code) from None
    finally:
        await run.cleanup()


class _Copy:
    """One copy: the two helpers, the relay between them, and the cleanup after a failure.

    No wait is unbounded: every read from the reader and every drain towards the writer must
    move bytes within the host's `command_timeout` (a stopped reader or writer, a stuck disk
    and a silent connection all end there), and the copy as a whole has a deadline that grows
    with its bytes and its file count. The helpers carry their own no-progress timeout too
    (`Watchdog` in host/mirror/common.py), for a controller that stops without closing anything."""

    def __init__(
        self, src_link, src, dst_link, dst_path, follow, progress, seen, swap=None
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
        return _fail_from(self.dst_link, answer)

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
            return await asyncio.wait_for(aw, t)
        except TimeoutError:
            raise self._stalled(side, what, t) from None

    async def _send(self, h: HelperProcess, obj: Any, side: str) -> None:
        idle = self.s_idle if side == "source" else self.d_idle
        await self._bounded(h.send_json(obj), side, "its helper took no input", idle)

    async def _answer(self, h: HelperProcess, side: str, what: str, idle: float) -> dict:
        link = self.src_link if side == "source" else self.dst_link
        return await self._bounded(_recv(h, link, None), side, what, idle)

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

    # -- the copy ---------------------------------------------------------------------------
    async def go(self) -> tuple[tuple[MirrorFile, ...], int | None, str | None]:
        sl, dl = self.src_link, self.dst_link
        try:
            started = await asyncio.gather(
                self._start(sl, "source"), self._start(dl, "destination"), return_exceptions=True
            )
            self.reader, self.writer = (
                h if isinstance(h, HelperProcess) else None for h in started
            )
            for h in started:
                if isinstance(h, BaseException):
                    raise h
            reader, writer = self.reader, self.writer
            assert reader is not None and writer is not None
            await self._send(
                writer,
                {
                    "op": "write",
                    "path": self.dst_path,
                    "files": self.files,
                    "dirs": self.src["dirs"],
                    "mode": self.src.get("mode"),
                    "idle": self.helper_idle,
                    "replace": self.swap,
                    "wait": self.helper_idle + self.settle,
                },
                "destination",
            )
            ready = await self._answer(
                writer, "destination", "its writer did not get ready", self.d_idle
            )
            if not ready.get("ok"):
                e = self._writer_fail(ready)
                e.before_copy = True  # nothing was created: a refusal
                raise e
            self.w_id, self.partial = (ready.get("pid"), ready.get("start")), ready.get("partial")
            self.dst_abs = ready.get("dst")
            await self._send(
                reader,
                {
                    "op": "read",
                    "path": self.src["path"],
                    "files": self.files,
                    "dirs": self.src["dirs"],
                    "follow": self.follow,
                    "outside": self.src.get("outside") or [],
                    "idle": self.helper_idle,
                    "wait": self.helper_idle + self.settle,
                },
                "source",
            )
            hello = await self._answer(reader, "source", "its reader did not start", self.s_idle)
            if not hello.get("ok"):
                raise _fail_from(sl, hello)
            self.r_id = (hello.get("pid"), hello.get("start"))
            # the writer speaks only on failure until it is told to finish
            self.writer_said = asyncio.ensure_future(_recv(writer, dl, None))
            trailers = await self._relay()
            await self._send(writer, {"op": "finish"}, "destination")
            await self._send(reader, {"op": "recheck"}, "source")
            hashed = await self._bounded(
                asyncio.shield(self.writer_said),
                "destination",
                "its writer reported no hashes",
                self.d_idle + self.settle,
            )
            if not hashed.get("ok"):
                raise self._writer_fail(hashed)
            # the source is walked again, and any file whose facts moved is hashed again there
            recheck = await self._answer(
                reader, "source", "it did not finish its re-check", self.s_idle + self.settle
            )
            if not recheck.get("ok"):
                raise _fail_from(sl, recheck)
            result = self._judge(trailers, hashed, recheck)
            await self._send(writer, {"op": "commit"}, "destination")
            done = await self._answer(
                writer, "destination", "its writer did not commit", self.d_idle
            )
            self.committed = bool(done.get("committed"))
            if not self.committed:
                raise self._writer_fail(done)
            return result, done.get("free_bytes"), done.get("kept_as")
        except (asyncssh.Error, OSError, EOFError, asyncio.IncompleteReadError) as e:
            said = await _last_word(self.writer_said)
            if said is not None and not said.get("ok"):
                raise self._writer_fail(said) from None
            raise HostError(
                await _which_died(sl, dl),
                f"connection lost during the copy ({type(e).__name__}: {e})",
                "disconnected",
            ) from None

    def _judge(self, trailers: list[dict], hashed: dict, recheck: dict) -> tuple[MirrorFile, ...]:
        result = []
        for f, t, h in zip(self.files, trailers, hashed["files"], strict=True):
            ok = t["bytes"] == f["bytes"] == h.get("bytes") and t["sha256"] == h["sha256"]
            result.append(
                MirrorFile(
                    f["path"],
                    f["bytes"],
                    t["sha256"],
                    h["sha256"],
                    "copied" if ok else "mismatch",
                    None if h.get("bytes") == f["bytes"] else h.get("bytes"),
                )
            )
        found = hashed.get("found") or {}
        if (
            set(found.get("files", [])) != {f["path"] for f in self.files}
            or found.get("other")
            or set(found.get("dirs", [])) != {d[0] for d in self.src["dirs"]}
        ):
            raise MirrorFail(
                "mismatch",
                f"{self.dst_link.name}: the partial folder does not hold "
                "exactly the source's files and folders",
                tuple(result),
            )
        if recheck.get("changed"):
            path, why = recheck["changed"][0]
            more = len(recheck["changed"]) - 1
            raise MirrorFail(
                "source-changed",
                f"{self.src_link.name}: {shown(path)} changed while it "
                f"was copied ({why})" + (f", and {more} more" if more else ""),
                tuple(result),
            )
        bad = [m for m in result if m.status != "copied"]
        if bad:
            raise MirrorFail(
                "mismatch", f"{shown(bad[0].path)} differs after the copy", tuple(result)
            )
        return tuple(result)

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
            said = await _last_word(self.writer_said)
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
                raise _fail_from(self.src_link, t)
            trailers.append(t)
            self.seen["files"] += 1
        return trailers

    # -- after a failure --------------------------------------------------------------------
    async def cleanup(self) -> str:
        """Stop both helpers and make sure no partial folder stays; a sentence saying so."""
        if self.cleaned is not None:
            return self.cleaned
        self.cleaned = "nothing was put in place"
        notes = []
        if self.writer is not None and not self.committed:
            # an unfinished writer removes its partial folder when its input ends
            with contextlib.suppress(Exception):
                self.writer.stdin.write_eof()
            if not await _exited(self.writer, min(5.0, self.d_idle)):
                notes.append(f"its writer on {self.dst_link.name} was stopped")
        for h in (self.reader, self.writer):
            if h is not None:
                h.close()
        if self.r_id is not None and not self.committed:
            # a closed channel says nothing of a stopped process behind it: end it by identity
            await _abandon(self.src_link, self.r_id, None)
        for h in (self.reader, self.writer):
            if h is not None:
                await _exited(h, 2.0)  # reaped here, not by a garbage collector later
        if self.writer_said is not None:
            self.writer_said.cancel()
            with contextlib.suppress(BaseException):
                await self.writer_said  # retrieved, so no "exception never retrieved" noise
        if self.committed or self.partial is None:
            self.cleaned = "; ".join(["nothing was put in place", *notes])
            return self.cleaned
        ans = await _abandon(
            self.dst_link,
            self.w_id,
            self.partial,
            {"dst": self.dst_abs, "backup": self.swap["backup"]} if self.swap else None,
        )
        if ans is None:
            gone = (
                f"the partial folder on {self.dst_link.name} could not be checked (the host "
                "did not answer); the next mirror there removes it"
            )
        elif ans.get("exists"):
            gone = f"the partial folder {shown(self.partial)} could NOT be removed"
        elif ans.get("exists") is None and self.writer_removed:
            gone = (
                f"the partial folder was removed by its writer (its path on {self.dst_link.name} "
                f"no longer leads to it: {ans.get('blocked')})"
            )
        elif ans.get("exists") is None:
            gone = (
                f"the partial folder {shown(self.partial)} could not be checked: its path no longer "
                f"leads to it ({ans.get('blocked')})"
            )
        else:
            gone = "the partial folder was removed"
        self.cleaned = "; ".join(["nothing was put in place", gone, *self._original(ans)])
        return self.cleaned

    def _original(self, ans: dict | None) -> list[str]:
        """Where the destination being replaced is now, as its host says (a sentence)."""
        if not self.swap:
            return []
        back = shown(self.swap["backup"])
        if ans is None:
            return [f"the destination being replaced is under its name or kept as {back}"]
        if (
            ans.get("dst_exists") is None
            and ans.get("backup_exists") is None
            and ans.get("blocked")
        ):
            return [
                f"where the destination being replaced is now cannot be checked by its path "
                f"({ans['blocked']})"
            ]
        if ans.get("dst_exists") and not ans.get("backup_exists"):
            return ["the destination being replaced is unchanged under its name"]
        if ans.get("backup_exists"):
            self.kept_as = self.swap["backup"]
            return [f"the destination being replaced is kept as {back}"]
        return [f"the destination being replaced was found neither under its name nor as {back}"]


async def _exited(h: HelperProcess, timeout: float) -> bool:
    try:
        await h.wait(timeout)
        return True
    except (Exception, asyncio.CancelledError):
        return False


async def _abandon(
    link: HostLink,
    ident: tuple[Any, Any] | None,
    partial: str | None,
    places: dict[str, Any] | None = None,
) -> dict | None:
    """Kill a helper that no longer answers (pid + start time) and remove its partial folder,
    on its host, over the link's own connection; the answer, or None when the host is gone."""
    pid, start = ident if ident else (None, None)
    try:
        return await link.call(
            HELPER,
            "abandon",
            pid=pid,
            start=start,
            partial=partial,
            **(places or {}),
            within=link.host.command_timeout + 10,
        )
    except HostError:  # a HelperError too: the helper could not
        return None


async def _last_word(task: asyncio.Future | None) -> dict | None:
    """What the writer said before its stream broke (a disk-full error, say), if anything."""
    if task is None:
        return None
    try:
        msg = await asyncio.wait_for(asyncio.shield(task), 2)
    except (Exception, asyncio.CancelledError):
        return None
    return msg if isinstance(msg, dict) else None


async def _which_died(src_link: HostLink, dst_link: HostLink) -> str:
    """The host that no longer answers, to name it in the error."""
    for link in (dst_link, src_link):
        try:
            await link.run(["true"], timeout=min(5.0, link.host.connect_timeout + 1))
        except HostError:
            return link.name
    return f"{src_link.name}->{dst_link.name}"


async def _recv(h: HelperProcess, link: HostLink, timeout: float | None) -> dict:
    try:
        msg = await asyncio.wait_for(h.recv_json(), timeout)
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
