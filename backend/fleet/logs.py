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
from fleetdeck.backend.fleet.link.wire import checked
from fleetdeck.backend.host import logs as logs_main
from fleetdeck.backend.host import logs_wire
from fleetdeck.backend.host.lib.text import fsdec, fsenc

HELPER = logs_main.__name__
LINE_LIMIT = 1 << 20  # one answer line of the helper (its chunks are 64 KiB of text)


def _request(
    host: HostConfig, run: str, lines: int, follow: bool, grep: str | None = None
) -> dict[str, Any]:
    """The request line of `tail`, as `logs_wire.TailRequest` declares it, with its op."""
    req: logs_wire.TailRequest = {
        "run": run,
        "roots": list(host.all_roots),
        "lines": lines,
        "follow": follow,
    }
    if grep is not None:
        req["grep"] = grep
    return {"op": logs_wire.TAIL, **req}


def tailed(host: str, ans: dict[str, Any]) -> logs_wire.Tailed:
    """The reader's first answer (one that says ok) held to its record."""
    return checked(host, ans, logs_wire.Tailed, "log reader")


def followed(host: str, msg: dict[str, Any]) -> logs_wire.Appended | logs_wire.Truncated:
    """A follow line (not an error) held to its record: text appended, or the log truncated."""
    if msg.get("event") == logs_wire.TRUNCATED:
        return checked(host, msg, logs_wire.Truncated, "log reader")
    return checked(host, msg, logs_wire.Appended, "log reader")


def grep_pattern(grep: str) -> re.Pattern[str]:
    """`grep` compiled, or ValueError with a sentence naming it (checked before any host is
    asked)."""
    try:
        return re.compile(grep)
    except re.error as e:
        raise ValueError(f"--grep {grep!r} is not a regular expression: {e}") from None


#: an agent's pattern (`bounded_pattern`): its length, how many unbounded repetitions (`*`, `+`,
#: `{m,}`) it may hold, and the largest bound of a `{m,n}`
PATTERN_MAX = 200
UNBOUNDED_MAX = 3
REPEAT_MAX = 100
#: escapes a bounded pattern may use: classes, anchors and white space (a digit would be a
#: backreference; any other letter is refused rather than guessed at)
ESCAPES = frozenset("dDwWsSbBAZtnrfv")
_REPEAT = re.compile(r"\*|\+|\?|\{([0-9]{1,3})?(,)?([0-9]{1,3})?\}")


def _class_end(pattern: str, i: int) -> int:
    """Where the character class opened at `i` ends (after its `]`); ValueError if it does not."""
    j = i + 1
    j += pattern.startswith("^", j)
    j += pattern.startswith("]", j)
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    if j >= len(pattern):
        raise ValueError("a [ that is not closed")
    return j + 1


def _token(pattern: str, i: int) -> tuple[int, bool]:
    """(where the token at `i` ends, whether a repetition may follow it): only a single
    character, escape, class or `.` may be repeated."""
    c = pattern[i]
    if c == "\\":
        e = pattern[i + 1 : i + 2]
        if not e or (e.isalnum() and e not in ESCAPES):
            raise ValueError(f"\\{e} is not an escape a bounded pattern may use")
        return i + 2, e not in "bBAZ"
    if c == "[":
        return _class_end(pattern, i), True
    if c == "(":
        if pattern.startswith("(?i)", i) and i == 0:
            return i + 4, False
        if pattern.startswith("(?:", i):
            return i + 3, False
        if pattern.startswith("(?", i):
            raise ValueError("(?...) other than (?:...) and a leading (?i) is not allowed")
        return i + 1, False
    return i + 1, c not in "|^$)"


def bounded_pattern(pattern: str, literal: bool) -> str:
    """An agent's pattern for `log_lines(grep=...)`: `literal`, the string itself (escaped);
    else a regular expression that cannot backtrack without end, whatever line it meets: at most
    PATTERN_MAX characters, no group repeated, no repetition repeated, no backreference or
    lookaround, at most UNBOUNDED_MAX unbounded repetitions and no `{m,n}` above REPEAT_MAX.
    ValueError with a sentence naming what is refused."""
    if not pattern or len(pattern) > PATTERN_MAX:
        raise ValueError(f"a pattern is 1 to {PATTERN_MAX} characters")
    if literal:
        return re.escape(pattern)
    i, repeatable, unbounded = 0, False, 0
    while i < len(pattern):
        m = _REPEAT.match(pattern, i) if pattern[i] in "*+?{" else None
        if m is None:
            if pattern[i] in "*+?{":
                raise ValueError(f"a {pattern[i]!r} that is not a repetition: escape it")
            i, repeatable = _token(pattern, i)
            continue
        if not repeatable:
            raise ValueError("only a single character, escape, class or . may be repeated")
        lo, comma, hi = m.groups()
        if m.group() in "*+" or (comma and hi is None):
            unbounded += 1
        elif max(int(lo or 0), int(hi or 0)) > REPEAT_MAX:
            raise ValueError(f"a {{m,n}} repetition is at most {REPEAT_MAX}")
        i, repeatable = m.end() + pattern.startswith("?", m.end()), False
    if unbounded > UNBOUNDED_MAX:
        raise ValueError(f"at most {UNBOUNDED_MAX} unbounded repetitions (* + {{m,}})")
    grep_pattern(pattern)
    return pattern


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
            first = tailed(
                link.name, answer_or_raise(link.name, await _next(helper, link, timeout))
            )
        except HelperError as e:
            raise HostError(
                link.name,
                str(e.error.get("message") or "train.log could not be read"),
                str(e.error.get("code") or "helper"),
            ) from None
        pending = b""
        searched = first.get("searched")
        if pattern is not None and searched is not None:
            read, size = searched["bytes"], searched["size"]
            if 0 <= read < size:
                yield (
                    f"-- matches in the last {read} bytes of train.log only ({size} bytes in all): "
                    "a longer log is not searched whole --"
                )
        cut = first.get("cut")
        if cut is not None:
            yield cut_line(cut)
        text = first["text"]
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
            said = followed(link.name, msg)
            if "event" in said:
                if pending and (pattern is None or pattern.search(fsdec(pending))):
                    yield fsdec(pending)
                pending = b""
                yield "-- train.log was truncated or replaced; reading it from its start --"
                continue
            pending += fsenc(said["text"])
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


def cut_line(cut: logs_wire.Cut) -> str:
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
