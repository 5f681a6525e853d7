"""A run's train.log from its host: the last lines, and with `follow` what is appended after.

The host side is `host/logs.py`, a tied helper (it dies with its channel). Every line
read from it is bounded (`helpers.read_line`), and the text is handed on as the host's exact
bytes (surrogateescape), split into whole lines: a UTF-8 character cut between two chunks is
joined again before it is decoded. Display escapes each line (`host/lib/text.shown`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HelperError, HostError, answer_or_raise
from fleetdeck.backend.fleet.link.channel import AnswerTooLarge, ShellOutputError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import fsdec, fsenc

HELPER = "fleetdeck.backend.host.logs"
LINE_LIMIT = 1 << 20  # one answer line of the helper (its chunks are 64 KiB of text)


def _request(
    host: HostConfig, run: str, lines: int, follow: bool, grep: str | None = None
) -> dict[str, Any]:
    req = {"op": "tail", "run": run, "roots": host.all_roots, "lines": lines, "follow": follow}
    if grep is not None:
        req["grep"] = grep
    return req


def grep_pattern(grep: str) -> re.Pattern[str]:
    """`grep` compiled, or ValueError with a sentence naming it (checked before any host is
    asked)."""
    try:
        return re.compile(grep)
    except re.error as e:
        raise ValueError(f"--grep {grep!r} is not a regular expression: {e}") from None


async def log_lines(
    link: HostLink,
    run: str,
    lines: int = 40,
    follow: bool = False,
    timeout: float | None = None,
    grep: str | None = None,
) -> AsyncIterator[str]:
    """The last `lines` lines of `run`'s train.log (a run folder's name under one of the host's
    runs roots, or its path), then, with `follow`, each line appended to it, until the caller
    stops iterating. A line is the host's text (undecodable bytes kept as surrogates), without
    its newline; a file that was truncated or replaced yields the marker line
    `-- train.log was truncated or replaced; reading it from its start --`.
    HostError when the host cannot be asked or has no such log (codes `no-run`, `no-log`,
    `not-a-file`, `unreadable`, `answer-too-large`, `timeout`).

    `grep` (a regular expression): only the lines that match it, the last `lines` of them
    found on the host in the end of the log it reads (`host/logs.GREP_BYTES`; a line says when
    the log is longer), then the appended lines that match, matched here."""
    timeout = link.host.command_timeout if timeout is None else timeout
    pattern = grep_pattern(grep) if grep is not None else None
    helper = await link.start_helper(
        HELPER, ["--tied"], what="log reader", within=link.host.connect_timeout + timeout
    )
    try:
        await helper.send_json(_request(link.host, run, lines, follow, grep))
        try:
            first = answer_or_raise(link.name, await _next(helper, link, timeout))
        except HelperError as e:
            raise HostError(
                link.name,
                str(e.error.get("message") or "train.log could not be read"),
                str(e.error.get("code") or "helper"),
            ) from None
        pending = b""
        cut = first.get("cut")
        searched = first.get("searched")
        if pattern is not None and isinstance(searched, dict):
            read, size = searched.get("bytes"), searched.get("size")
            if isinstance(read, int) and isinstance(size, int) and 0 <= read < size:
                yield (
                    f"-- matches in the last {read} bytes of train.log only ({size} bytes in all): "
                    "a longer log is not searched whole --"
                )
        if isinstance(cut, dict):
            yield cut_line(cut)
        text = str(first.get("text") or "")
        for line in _split(fsenc(text) + b"\n") if text else ():
            yield line
        while follow:
            msg = await _next(helper, link, None)
            if msg.get("ok") is False:
                # the follow ended on the host (train.log replaced by a symlink): its sentence
                if pending and (pattern is None or pattern.search(fsdec(pending))):
                    yield fsdec(pending)
                error = msg.get("error")
                if not isinstance(error, dict):
                    error = {}
                raise HostError(
                    link.name,
                    str(error.get("message") or "the log reader stopped"),
                    str(error.get("code") or "helper"),
                )
            if msg.get("event") == "truncated":
                if pending and (pattern is None or pattern.search(fsdec(pending))):
                    yield fsdec(pending)
                pending = b""
                yield "-- train.log was truncated or replaced; reading it from its start --"
                continue
            pending += fsenc(str(msg.get("text") or ""))
            *whole, pending = pending.split(b"\n")
            for b in whole:
                line = fsdec(as_shown(b))
                if pattern is None or pattern.search(line):
                    yield line
            if len(pending) > LINE_LIMIT:  # a line without end: shown in pieces
                line = fsdec(pending)
                if pattern is None or pattern.search(line):
                    yield line
                pending = b""
    finally:
        helper.close()


def cut_line(cut: dict[str, Any]) -> str:
    """The marker line for what the host left out of the tail (its `cut`)."""
    lines, size = cut.get("lines"), cut.get("bytes")
    lines = lines if isinstance(lines, int) and lines >= 0 else 0
    size = size if isinstance(size, int) and size >= 0 else 0
    parts = [f"{lines} earlier line{'' if lines == 1 else 's'}"] if lines else []
    if cut.get("partial") is True:
        parts.append("the start of the line below")
    what = " and ".join(parts) or "earlier lines"
    return (
        f"-- {what} ({size} bytes of train.log) not shown: sent as escaped text they would pass "
        f"the {LINE_LIMIT >> 20} MiB a host may send in one answer --"
    )


def as_shown(line: bytes) -> bytes:
    """A line as a terminal showed it: a progress bar rewrites itself with `\r` (tqdm writes
    `\r 45%|...| 72/159` a thousand times on one line), so only its last non-empty segment is
    kept, never a screen of `\r`-joined bars."""
    if b"\r" not in line:
        return line
    for seg in reversed(line.split(b"\r")):
        if seg.strip():
            return seg
    return b""


def _split(data: bytes) -> list[str]:
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [fsdec(as_shown(p)) for p in parts]


async def _next(helper: Any, link: HostLink, timeout: float | None) -> dict[str, Any]:
    """The reader's next message (the helper's own reading: bounded, and a payload missing from
    the host's cache is sent again before the first answer)."""
    try:
        async with asyncio.timeout(timeout):
            msg = await helper.recv_json(LINE_LIMIT)
    except TimeoutError:
        raise HostError(
            link.name, f"the log reader did not answer within {timeout:g}s", "timeout"
        ) from None
    except AnswerTooLarge as e:
        raise HostError(link.name, str(e), "answer-too-large") from None
    except ShellOutputError as e:
        raise HostError(link.name, str(e), "shell-output") from None
    except EOFError:
        why = await helper.read_stderr()
        raise HostError(
            link.name, f"the log reader ended: {why or 'connection closed'}", "helper"
        ) from None
    except ValueError:
        raise HostError(link.name, "the log reader sent what is not JSON", "helper") from None
    if not isinstance(msg, dict):
        raise HostError(link.name, "the log reader sent what is not an object", "helper")
    return msg
