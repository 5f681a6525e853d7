"""A helper's channels from a host, bounded: one answer line (`read_line`), a whole output
(`read_bounded`), strict JSON (`loads`), stderr for an error message (`bounded_text`), and the
streams of a long-lived helper (`HelperProcess`), which starts again with its payload sent
whole when the host's loader says it lacks it (`is_missing`). What starts a helper is boot.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fleetdeck.backend.host.lib import jsondepth
from fleetdeck.backend.host.lib import payload as host_payload
from fleetdeck.backend.host.lib.jsondepth import TooDeep
from fleetdeck.backend.host.lib.text import shown

STDERR_LIMIT = 4096
# The bounds of every channel from a host (docs/probe.md): past one the answer is refused with
# `answer-too-large` naming the host and the channel, and the helper is stopped.
#: one JSON answer line of a resident helper (the probe's snapshot among them)
ANSWER_LIMIT = 8 << 20
#: the whole stdout of a one-shot helper or command
OUTPUT_LIMIT = 32 << 20
#: what is kept of a one-shot command's stderr (its end, where a traceback says what broke)
STDERR_KEEP = 64 << 10
SHELL_NOISE = "the login shell printed text before the {what}'s answer: {text}"


class ShellOutputError(ValueError):
    """A helper's stdout began with text that is not its answer (a chatty login shell)."""


class AnswerTooLarge(ValueError):
    """A host sent more than a channel's bound (`ANSWER_LIMIT`, `OUTPUT_LIMIT`)."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(
            f"the {what}'s answer passed {limit >> 20} MiB; refused (a host never "
            "needs to send this much on this channel)"
        )
        self.what = what
        self.limit = limit


async def read_line(stream: Any, limit: int, what: str) -> bytes:
    """One line from a helper's stdout, at most `limit` bytes, without reading past it.

    An asyncssh stream hands back a partial line once its receive window is full (2 MiB by
    default): the parts are joined here until the newline, so a big answer is not mistaken for
    shell chatter. An asyncio stream raises ValueError past its own limit. Either way, past
    `limit` the read stops with `AnswerTooLarge` and the caller closes the helper, so memory
    stays bounded. b"" at end of file; the last line may lack its newline.
    """
    parts: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = await stream.readline()
        except (ValueError, asyncio.LimitOverrunError):
            raise AnswerTooLarge(what, limit) from None
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        if chunk.endswith(b"\n"):
            break
        if total > limit:
            raise AnswerTooLarge(what, limit)
    if total > limit:
        raise AnswerTooLarge(what, limit)
    return b"".join(parts)


async def read_bounded(stream: Any, limit: int, what: str, keep_tail: bool = False) -> bytes:
    """All of a stream up to `limit` bytes: past it `AnswerTooLarge`, or with `keep_tail` the
    stream is drained to its end and only its last `limit` bytes are kept."""
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return b"".join(parts)
        if not isinstance(chunk, bytes):
            chunk = str(chunk).encode()
        parts.append(chunk)
        total += len(chunk)
        if total > limit:
            if not keep_tail:
                raise AnswerTooLarge(what, limit)
            data = b"".join(parts)[-limit:]
            parts, total = [data], len(data)


def bounded_text(data: bytes | str, limit: int = STDERR_LIMIT) -> str:
    """A helper's stderr for an error message: all of it up to `limit` characters (else its
    end, where a traceback says what broke), each line escaped for display."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.strip()
    if len(text) > limit:
        text = "..." + text[-limit:]
    return "\n".join(shown(line) for line in text.splitlines())


def noise_text(data: bytes, what: str) -> str:
    """The sentence for text a login shell printed ahead of a helper's answer."""
    return SHELL_NOISE.format(what=what, text=shown(data.decode("utf-8", "replace").strip()[:300]))


class HelperProcess:
    """A long-lived helper on a host, with byte streams both ways (ssh channel or subprocess)."""

    def __init__(
        self,
        proc: Any,
        remote: bool,
        what: str = "helper",
        resend: Callable[[], Awaitable[Any]] | None = None,
        sha256: str | None = None,
    ) -> None:
        self._proc = proc
        self._remote = remote
        self._answered = False
        self.what = what
        self.stdin = proc.stdin
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        # started from the host's payload cache: until the first answer, a "missing" line
        # from the loader means start again with the payload sent (`resend`) and replay
        # what was written so far
        self._resend = resend
        self._sha256 = sha256
        self._sent: list[bytes] = []

    async def send_json(self, obj: Any) -> None:
        """Write one JSON line to the helper."""
        data = json.dumps(obj).encode() + b"\n"
        if self._resend is not None:
            self._sent.append(data)
        self.stdin.write(data)
        await self.stdin.drain()

    async def _first_line(self, limit: int) -> bytes:
        line = await read_line(self.stdout, limit, self.what)
        resend, self._resend = self._resend, None
        if resend is not None and is_missing(line, self._sha256):
            old = self._proc
            self._stop(old)
            proc = await resend()
            self._proc, self.stdin, self.stdout, self.stderr = (
                proc,
                proc.stdin,
                proc.stdout,
                proc.stderr,
            )
            for data in self._sent:
                self.stdin.write(data)
            await self.stdin.drain()
            await self._reap(old)
            line = await read_line(self.stdout, limit, self.what)
        self._sent = []
        return line

    async def recv_json(self, limit: int = ANSWER_LIMIT) -> Any:
        """Read one JSON line from the helper, at most `limit` bytes (`AnswerTooLarge` past it).
        EOFError when it exited; ShellOutputError when text that is not JSON came before its
        first answer (a login shell that prints); `jsondepth.TooDeep` (a ValueError, code
        `answer-too-deep`) for a line nested past `jsondepth.MAX_DEPTH` levels. NaN and Infinity
        tokens are not JSON: a line holding one is refused like any other malformed line."""
        if self._resend is not None:
            line = await self._first_line(limit)
        else:
            line = await read_line(self.stdout, limit, self.what)
        if not line:
            raise EOFError("helper exited")
        try:
            answer = loads(line, what=f"the {self.what}'s answer")
        except (TooDeep, NonFinite):
            raise
        except ValueError:
            if self._answered:
                raise
            noise = line
            # the rest of the chatter, up to the answer (bounded: a few lines)
            for _ in range(20):
                try:
                    async with asyncio.timeout(1):
                        more = await read_line(self.stdout, 1 << 16, self.what)
                except (TimeoutError, AnswerTooLarge):
                    break
                if not more or more.lstrip().startswith(b"{"):
                    break
                noise += more
            raise ShellOutputError(noise_text(noise, self.what)) from None
        self._answered = True
        return answer

    async def read_stderr(self, limit: int = STDERR_LIMIT) -> str:
        """What the helper said on stderr, after it ended: all of it, bounded (see
        `bounded_text`), read for at most 2 s."""
        chunks: list[bytes] = []
        total = 0

        async def drain() -> None:
            nonlocal total
            while True:
                data = await self.stderr.read(65536)
                if not data:
                    return
                data = data if isinstance(data, bytes) else str(data).encode()
                chunks.append(data)
                total += len(data)
                while total > 4 * limit and len(chunks) > 1:
                    total -= len(chunks.pop(0))

        try:
            async with asyncio.timeout(2):
                await drain()
        except Exception:  # TimeoutError among them; a cancellation goes on
            pass
        return bounded_text(b"".join(chunks), limit)

    def close(self) -> None:
        """Stop the helper now: killed locally; remotely its channel is closed, which ends a
        resident helper on the host (see boot.WATCHDOG), however busy it is."""
        self._stop(self._proc)

    def _stop(self, proc: Any) -> None:
        try:
            if self._remote:
                proc.close()
            else:
                # its own session (localproc.spawn): the group holds its children too
                proc.kill()
        except (ProcessLookupError, OSError):
            pass

    async def _reap(self, proc: Any) -> None:
        try:
            async with asyncio.timeout(2):
                await (proc.wait_closed() if self._remote else proc.wait())
        except Exception:
            pass

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the helper to exit (at most `timeout` seconds: TimeoutError past them);
        its exit status."""
        async with asyncio.timeout(timeout):
            if self._remote:
                await self._proc.wait_closed()
                return self._proc.exit_status
            return await self._proc.wait()


class NonFinite(ValueError):
    """A JSON answer that holds `NaN`, `Infinity` or `-Infinity` where a number goes: JSON has
    no such numbers. Code `bad-answer`; the sentence names the field (`gpus[0].temperature_c`)."""

    code = "bad-answer"


class _Constant:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _field_of(doc: Any) -> tuple[str, str]:
    """(where, token) of the first non-finite constant in a parsed document (iterative)."""
    todo: list[tuple[str, Any]] = [("", doc)]
    while todo:
        where, v = todo.pop()
        if isinstance(v, _Constant):
            return where or "the top level", v.name
        if isinstance(v, dict):
            todo.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            todo.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return "the top level", "NaN"


class _SawConstant(Exception):
    """Raised by the shared decoder at a non-finite constant: the slow path names its field."""


def _refuse_constant(name: str) -> Any:
    raise _SawConstant(name)


#: one strict decoder for every answer (`json.loads` with a keyword makes a decoder, its scanner
#: with it, at each call); a non-finite constant stops it at once
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _text(data: bytes | str) -> str:
    """`data` as `json.loads` reads it: bytes decoded by their detected encoding, a str whose
    UTF-8 byte order mark is refused."""
    if isinstance(data, str):
        if data.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
        return data
    return bytes(data).decode(json.detect_encoding(data), "surrogatepass")


def loads(data: bytes | str, what: str = "the answer") -> Any:
    """JSON from a host: strict JSON, and nested at most `jsondepth.MAX_DEPTH` levels: deeper is
    `TooDeep` (code `answer-too-deep`, a ValueError whose sentence starts with `what`), found
    without recursion before parsing. `NaN`, `Infinity` and `-Infinity` are not JSON numbers:
    an answer holding one is `NonFinite` (code `bad-answer`) naming the field, looked for only
    when the parser met one."""
    text = _text(jsondepth.check(data, what=what))
    try:
        return _DECODER.decode(text)
    except _SawConstant:
        pass
    seen: list[str] = []

    def constant(name: str) -> Any:
        seen.append(name)
        return _Constant(name)

    doc = json.loads(text, parse_constant=constant)
    where, token = _field_of(doc)
    raise NonFinite(f"{what} holds {token} at {shown(where)[:200]}, which is not a number")


def is_missing(line: bytes, sha256: str | None) -> bool:
    """True when `line` is the loader's answer that payload `sha256` is not in its cache."""
    if not line.startswith(b'{"fleetdeck_payload"'):
        return False
    try:
        doc = loads(line)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and doc.get("fleetdeck_payload") == host_payload.MISSING
        and doc.get("sha256") == sha256
    )
