"""Host side of `fleetdeck logs`: the end of a run's train.log, and then what is appended to it.

Runs on the host (stdlib + host library, Python 3.8+), started through `HostLink.start_helper`
with `--tied`, so it dies with its channel (request and answer lines declared in `logs_wire`).
Request, one JSON line on stdin:
`{"op": "tail", "run": NAME_OR_PATH, "roots": [RUN_ROOT...], "lines": 40, "follow": false}`,
with `"grep": PATTERN` (a regular expression) for the last lines that match it, looked for in
the last GREP_BYTES of the log (`"searched": {"bytes": B, "size": S}` says how much was read)
(another `op` is a `bad-request`, in the one error shape of every helper). The run is a path,
or a folder name looked for directly under each root. Answer: JSON lines on stdout, each at most
CHUNK bytes of text:

- `{"ok": true, "path": LOG, "text": LAST_LINES, "offset": N}`, with `"cut": {"lines": K,
  "bytes": B}` when the lines asked for would not fit in ANSWER_BUDGET as they travel
  (escaped JSON: an undecodable byte is six characters, `\udcff`): the K earlier lines, B
  bytes of the log, are left out (`"partial": true`: the last line alone did not fit, and
  only its end is sent); then, with `follow`,
- `{"text": APPENDED, "offset": N}` as the file grows (polled every POLL_S seconds), and
  `{"event": "truncated"}` when it shrinks or is replaced by another regular file (it is then
  read from its start);
- or one `{"ok": false, "error": {"code", "message"}}`: `no-run`, `no-log`, `not-a-file`
  (train.log is a symlink or not a regular file: never followed), `unreadable`; while
  following, `symlink` (train.log was replaced by a symlink: the follow ends, nothing of its
  target read) or `not-a-file` (replaced by what is not a regular file), and the helper exits.

The run folder is opened once and train.log is looked at and opened through it, never through
a symlink (O_NOFOLLOW), and without waiting on a FIFO (O_NONBLOCK). The text is the file's
bytes decoded as UTF-8 with surrogateescape: the controller escapes it for display. The tail
reads at most TAIL_BYTES; nothing here reads a file whole.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import time
from collections import deque

from fleetdeck.backend.host.lib import files, flags, layout
from fleetdeck.backend.host.lib.serve import dumps

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Deque, List, Pattern

    from fleetdeck.backend.host.logs_wire import Cut, Tailed

#: the one op this reader answers, `logs_wire.TAIL` (written out here so that the wire's typing
#: is not imported on the host)
OP = "tail"
LOG = "train.log"
TAIL_BYTES = 256 << 10
CHUNK = 64 << 10
POLL_S = 0.5
MAX_LINES = 10000
#: how much of the end of train.log a `grep` reads, at most, and its longest line
GREP_BYTES = 64 << 20
GREP_LINE = 1 << 20


def _fail(code: str, message: str) -> dict[str, object]:
    return {"ok": False, "error": {"code": code, "message": message}}


def resolve(req: dict[str, Any]) -> str:
    """The run folder the request names (`layout.resolve_run`, the one rule), or raise
    LookupError(code, sentence)."""
    return layout.resolve_run(str(req.get("run") or ""), req.get("roots") or [])


def _open(dfd: int, path: str) -> tuple[int, os.stat_result]:
    """train.log in the run folder open as `dfd`, opened without following a symlink and
    without waiting on a FIFO: (fd, stat) of a regular file, else LookupError(code, sentence)."""
    try:
        fd = files.open_regular(LOG, dir_fd=dfd)
    except files.NotRegular:
        raise LookupError("not-a-file", "%s is not a regular file" % path) from None
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise LookupError("no-log", "no %s in %s yet" % (LOG, os.path.dirname(path))) from None
        if e.errno == errno.ELOOP:
            raise LookupError("not-a-file", "%s is a symlink; not followed" % path) from None
        raise LookupError("unreadable", "%s: %s" % (path, e.strerror)) from None
    return fd, os.fstat(fd)


#: what one answer line's text may take as it travels: the controller takes lines of at most
#: 1 MiB (fleet/logs.LINE_LIMIT), and the rest of the line has room in what is left
ANSWER_BUDGET = 960 << 10


def _travel(text: str) -> int:
    """How many characters `text` takes as it travels in an answer (escaped JSON)."""
    return len(dumps(text)) - 2


def _char_cost(ch: str) -> int:
    """`_travel` of one character (JSON with ensure_ascii)."""
    o = ord(ch)
    if o < 0x20:
        return 2 if ch in "\b\f\n\r\t" else 6
    if o < 0x80:
        return 2 if ch in '"\\' else 1
    return 6 if o < 0x10000 else 12


def fit(parts: list[bytes], budget: int = ANSWER_BUDGET) -> tuple[str, Cut | None]:
    """The last of the lines `parts` (bytes, without newlines) that fit in `budget` as they
    travel, joined: (text, what was cut or None). When not even the last one fits, its end
    (`"partial": true`)."""
    kept: List[bytes] = []
    used = 0
    for p in reversed(parts):
        cost = _travel(p.decode("utf-8", "surrogateescape")) + (2 if kept else 0)  # "\n" is 2
        if used + cost > budget:
            break
        kept.append(p)
        used += cost
    kept.reverse()
    cut = len(parts) - len(kept)
    cut_bytes = sum(len(p) + 1 for p in parts[:cut])
    text = "\n".join(p.decode("utf-8", "surrogateescape") for p in kept)
    if not kept and parts:
        # one line longer than the budget: its end, as much of it as fits
        last = parts[-1].decode("utf-8", "surrogateescape")
        n, used = len(last), 0
        while n > 0 and used + _char_cost(last[n - 1]) <= budget:
            n -= 1
            used += _char_cost(last[n])
        text = last[n:]
        cut_bytes = sum(len(p) + 1 for p in parts[:-1]) + len(
            last[:n].encode("utf-8", "surrogateescape")
        )
        return text, {"lines": cut - 1, "bytes": cut_bytes, "partial": True}
    return text, ({"lines": cut, "bytes": cut_bytes} if cut else None)


def tail_text(
    fd: int, size: int, lines: int, budget: int = ANSWER_BUDGET
) -> tuple[str, int, Cut | None]:
    """The last `lines` lines of the first `size` bytes (reading at most TAIL_BYTES), as many
    of them as fit in `budget` as they travel: (text, offset after it, what was cut or None)."""
    start = max(0, size - TAIL_BYTES)
    os.lseek(fd, start, os.SEEK_SET)
    data = b""
    while len(data) < size - start:
        chunk = os.read(fd, size - start - len(data))
        if not chunk:
            break
        data += chunk
    if start > 0 and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # a partial first line
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    keep = parts[-lines:] if lines > 0 else []
    text, cut = fit(keep, budget)
    return text, start + len(data), cut


def grep_tail(
    fd: int, size: int, lines: int, pattern: Pattern[str], budget: int = ANSWER_BUDGET
) -> tuple[str, int, Cut | None, int]:
    """The last `lines` lines matching `pattern` (compiled) in the last GREP_BYTES of the
    first `size` bytes, read in chunks (a line longer than GREP_LINE is matched in pieces):
    (text, offset after it, what was cut or None, bytes read)."""
    start = max(0, size - GREP_BYTES)
    os.lseek(fd, start, os.SEEK_SET)
    kept: Deque[bytes] = deque(maxlen=max(1, lines))
    carry = b""
    read = 0
    skip_first = start > 0

    def match(line: bytes) -> None:
        if pattern.search(line.decode("utf-8", "surrogateescape")):
            kept.append(line)

    while read < size - start:
        chunk = os.read(fd, min(CHUNK * 16, size - start - read))
        if not chunk:
            break
        read += len(chunk)
        carry += chunk
        parts = carry.split(b"\n")
        carry = parts.pop()
        if skip_first and parts:
            parts.pop(0)  # a partial first line
            skip_first = False
        for p in parts:
            match(p)
        while len(carry) > GREP_LINE:
            match(carry[:GREP_LINE])
            carry = carry[GREP_LINE:]
    if carry and not skip_first:
        match(carry)
    text, cut = fit(list(kept) if lines > 0 else [], budget)
    return text, start + read, cut, read


def _send(obj: object) -> None:
    sys.stdout.buffer.write(dumps(obj).encode("utf-8", "surrogateescape") + b"\n")
    sys.stdout.flush()


def main() -> int:
    raw = sys.stdin.buffer.readline()
    try:
        req = json.loads(raw.decode("utf-8", "surrogateescape"))
        if not isinstance(req, dict):
            raise ValueError("not an object")
    except ValueError as e:
        _send(_fail("bad-request", "the request is not a JSON object: %s" % e))
        return 2
    if req.get("op") != OP:
        _send(_fail("bad-request", "unknown op %r (known: %s)" % (req.get("op"), OP)))
        return 2
    lines = max(0, min(int(req.get("lines") or 40), MAX_LINES))
    try:
        run = resolve(req)
    except LookupError as e:
        code, message = e.args if len(e.args) == 2 else ("no-run", str(e))
        _send(_fail(code, message))
        return 0
    path = os.path.join(run, LOG)
    try:
        # the run folder, pinned: train.log is looked at through it from here on
        dfd = os.open(run, os.O_RDONLY | os.O_DIRECTORY | flags.CLOEXEC)
    except OSError as e:
        _send(_fail("no-run", "%s: %s" % (run, e.strerror)))
        return 0
    try:
        fd, st = _open(dfd, path)
    except LookupError as e:
        code, message = e.args if len(e.args) == 2 else ("unreadable", str(e))
        _send(_fail(code, message))
        return 0
    grep = req.get("grep")
    if grep is not None:
        try:
            pattern = re.compile(str(grep))
        except re.error as e:
            _send(_fail("bad-pattern", "--grep %r is not a regular expression: %s" % (grep, e)))
            return 0
        text, offset, cut, read = grep_tail(fd, st.st_size, lines, pattern)
    else:
        text, offset, cut = tail_text(fd, st.st_size, lines)
    first: Tailed = {"path": path, "text": text, "offset": offset}
    if grep is not None:
        first["searched"] = {"bytes": read, "size": st.st_size}
    if cut is not None:
        first["cut"] = cut
    _send({"ok": True, **first})
    if not req.get("follow"):
        return 0
    return follow(dfd, path, fd, st.st_ino, offset)


def follow(dfd: int, path: str, fd: int | None, ino: int, offset: int) -> int:
    """Send what is appended to train.log until the controller goes (the helper is tied to its
    channel). `fd` is the open log (None while it is away: rotated, not made again yet); a log
    replaced by a symlink or by what is not a regular file ends the follow with one error."""
    while True:
        time.sleep(POLL_S)
        try:
            now = os.stat(LOG, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue  # rotated away for a moment: wait for the new one
        if stat.S_ISLNK(now.st_mode):
            _send(
                _fail(
                    "symlink",
                    "%s was replaced by a symlink while it was followed; a symlink is "
                    "never followed, so the follow ends here" % path,
                )
            )
            return 0
        if fd is None or now.st_ino != ino or now.st_size < offset:
            if fd is not None:
                os.close(fd)
                fd = None
            try:
                fd, st = _open(dfd, path)
            except LookupError as e:
                code, message = e.args if len(e.args) == 2 else ("unreadable", str(e))
                if code == "not-a-file":
                    if "symlink" in message:  # swapped in between the look and the open
                        code, message = (
                            "symlink",
                            (
                                "%s was replaced by a symlink while it was "
                                "followed; a symlink is never followed, so the "
                                "follow ends here" % path
                            ),
                        )
                    _send(
                        _fail(
                            code, message + ("" if code == "symlink" else "; the follow ends here")
                        )
                    )
                    return 0
                continue  # gone again: wait for the next one
            ino, offset = st.st_ino, 0
            _send({"event": "truncated"})
        os.lseek(fd, offset, os.SEEK_SET)
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            offset += len(data)
            _send({"text": data.decode("utf-8", "surrogateescape"), "offset": offset})


if __name__ == "__main__":
    sys.exit(main())
