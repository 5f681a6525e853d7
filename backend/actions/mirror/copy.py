"""Mirror's copy engine: the reader and the writer helpers started, the copy judged from both
hosts' hashes and committed, and the cleanup after a failure (`main.py` decides whether and
what to copy; `relay.py` moves the bytes between the helpers; this module proves them)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fleetdeck.backend.actions.fronts import (
    COMMIT_LINE,
    FINISH_LINE,
    RECHECK_LINE,
    committed,
    mirror_abandon,
    read_line,
    reader_started,
    received,
    rechecked,
    write_line,
    writer_ready,
)
from fleetdeck.backend.actions.mirror.common import MirrorFail, MirrorFile, Progress
from fleetdeck.backend.actions.mirror.relay import Relay, fail_from, last_word, recv_answer
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link import own
from fleetdeck.backend.fleet.link.channel import HelperProcess
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.link.sshlib import asyncssh
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.mirror.wire import (
    Abandoned,
    AbandonRequest,
    Received,
    Rechecked,
)


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


class _Copy(Relay):
    """One copy: the two helpers, the relay between them, and the cleanup after a failure."""

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
                write_line(
                    {
                        "path": self.dst_path,
                        "files": self.files,
                        "dirs": self.src["dirs"],
                        "mode": self.src.get("mode"),
                        "idle": self.helper_idle,
                        "replace": self.swap,
                        "wait": self.helper_idle + self.settle,
                    }
                ),
                "destination",
            )
            ready = await self._answer(
                writer, "destination", "its writer did not get ready", self.d_idle
            )
            if not ready.get("ok"):
                e = self._writer_fail(ready)
                e.before_copy = True  # nothing was created: a refusal
                raise e
            sure = writer_ready(dl.name, ready)
            self.w_id, self.partial = (sure["pid"], sure["start"]), sure["partial"]
            own.add(self.dst_link.name, self.w_id)  # the probe there is told it is ours
            self.dst_abs = sure["dst"]
            await self._send(
                reader,
                read_line(
                    {
                        "path": self.src["path"],
                        "files": self.files,
                        "dirs": self.src["dirs"],
                        "follow": self.follow,
                        "outside": self.src.get("outside") or [],
                        "idle": self.helper_idle,
                        "wait": self.helper_idle + self.settle,
                    }
                ),
                "source",
            )
            hello = await self._answer(reader, "source", "its reader did not start", self.s_idle)
            if not hello.get("ok"):
                raise fail_from(sl, hello)
            started_as = reader_started(sl.name, hello)
            self.r_id = (started_as["pid"], started_as["start"])
            own.add(self.src_link.name, self.r_id)
            # the writer speaks only on failure until it is told to finish
            self.writer_said = asyncio.ensure_future(recv_answer(writer, dl, None))
            trailers = await self._relay()
            await self._send(writer, FINISH_LINE, "destination")
            await self._send(reader, RECHECK_LINE, "source")
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
                raise fail_from(sl, recheck)
            result = self._judge(trailers, received(dl.name, hashed), rechecked(sl.name, recheck))
            await self._send(writer, COMMIT_LINE, "destination")
            done = await self._answer(
                writer, "destination", "its writer did not commit", self.d_idle
            )
            self.committed = bool(done.get("ok")) and committed(dl.name, done)["committed"]
            if not self.committed:
                raise self._writer_fail(done)
            return result, done.get("free_bytes"), done.get("kept_as")
        except (asyncssh.Error, OSError, EOFError, asyncio.IncompleteReadError) as e:
            said = await last_word(self.writer_said)
            if said is not None and not said.get("ok"):
                raise self._writer_fail(said) from None
            raise HostError(
                await _which_died(sl, dl),
                f"connection lost during the copy ({type(e).__name__}: {e})",
                "disconnected",
            ) from None

    def _judge(
        self, trailers: list[dict], hashed: Received, recheck: Rechecked
    ) -> tuple[MirrorFile, ...]:
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
            (self.dst_abs, self.swap["backup"]) if self.swap else None,
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

    def _original(self, ans: Abandoned | None) -> list[str]:
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
    swap: tuple[str | None, str] | None = None,
) -> Abandoned | None:
    """Kill a helper that no longer answers (pid + start time) and remove its partial folder,
    on its host, over the link's own connection; for a replace (`swap`: the destination and
    its backup name) say where the original is. The answer, or None when the host is gone."""
    pid, start = ident if ident else (None, None)
    req: AbandonRequest = {"pid": pid, "start": start, "partial": partial}
    if swap is not None:
        req["dst"], req["backup"] = swap
    try:
        return await mirror_abandon(link, req, within=link.host.command_timeout + 10)
    except HostError:  # a HelperError too: the helper could not
        return None


async def _which_died(src_link: HostLink, dst_link: HostLink) -> str:
    """The host that no longer answers, to name it in the error."""
    for link in (dst_link, src_link):
        try:
            await link.run(["true"], timeout=min(5.0, link.host.connect_timeout + 1))
        except HostError:
            return link.name
    return f"{src_link.name}->{dst_link.name}"
