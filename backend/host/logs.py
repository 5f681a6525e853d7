"""Host side of `fleetdeck logs`: the end of a run's train.log, and then what is appended to it.

Runs on the host (stdlib + host library, Python 3.8+), started through `HostLink.start_helper`
with `--tied`, so it dies with its channel. Request, one JSON line on stdin:
`{"op": "tail", "run": NAME_OR_PATH, "roots": [RUN_ROOT...], "lines": 40, "follow": false}`
(another `op` is a `bad-request`, in the one error shape of every helper). The run is a path,
or a folder name looked for directly under each root. Answer: JSON lines on stdout, each at most
CHUNK bytes of text:

- `{"ok": true, "path": LOG, "text": LAST_LINES, "offset": N}`, then, with `follow`,
- `{"text": APPENDED, "offset": N}` as the file grows (polled every POLL_S seconds), and
  `{"event": "truncated"}` when it shrinks or is replaced (it is then read from its start);
- or one `{"ok": false, "error": {"code", "message"}}`: `no-run`, `no-log`, `not-a-file`
  (train.log is a symlink or not a regular file: never followed), `unreadable`.

The text is the file's bytes decoded as UTF-8 with surrogateescape: the controller escapes it
for display. The tail reads at most TAIL_BYTES; nothing here reads a file whole.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time

from fleetdeck.backend.host.lib import flags
from fleetdeck.backend.host.lib.serve import dumps

LOG = "train.log"
TAIL_BYTES = 256 << 10
CHUNK = 64 << 10
POLL_S = 0.5
MAX_LINES = 10000


def _fail(code, message):
    return {"ok": False, "error": {"code": code, "message": message}}


def resolve(req):
    """The run folder the request names, or raise LookupError with a sentence."""
    run = str(req.get("run") or "")
    if not run:
        raise LookupError("no run named")
    if os.path.isabs(run) or run.startswith("~"):
        path = os.path.expanduser(run)
        if os.path.isdir(path):
            return path
        raise LookupError("%s is not a folder on this host" % run)
    if "/" in run or run in (".", ".."):
        raise LookupError("a run is a folder name or an absolute path, not %r" % run)
    for root in req.get("roots") or []:
        path = os.path.join(os.path.expanduser(str(root)), run)
        if os.path.isdir(path):
            return path
    raise LookupError("no run folder %r under %s" % (run, ", ".join(str(r) for r in req.get("roots") or []) or "any runs root"))


def _open(path):
    """train.log opened without following a symlink; a regular file or an error."""
    try:
        fd = os.open(path, flags.READ_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise LookupError("no-log", "no %s in %s yet" % (LOG, os.path.dirname(path))) from None
        if e.errno == errno.ELOOP:
            raise LookupError("not-a-file", "%s is a symlink; not followed" % path) from None
        raise LookupError("unreadable", "%s: %s" % (path, e.strerror)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise LookupError("not-a-file", "%s is not a regular file" % path)
    return fd, st


def tail_text(fd, size, lines):
    """The last `lines` lines of the first `size` bytes (reading at most TAIL_BYTES)."""
    start = max(0, size - TAIL_BYTES)
    os.lseek(fd, start, os.SEEK_SET)
    data = b""
    while len(data) < size - start:
        chunk = os.read(fd, size - start - len(data))
        if not chunk:
            break
        data += chunk
    if start > 0 and b"\n" in data:
        data = data[data.index(b"\n") + 1:]   # a partial first line
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    keep = parts[-lines:] if lines > 0 else []
    return b"\n".join(keep).decode("utf-8", "surrogateescape"), start + len(data)


def _send(obj):
    sys.stdout.buffer.write(dumps(obj).encode("utf-8", "surrogateescape") + b"\n")
    sys.stdout.flush()


def main():
    raw = sys.stdin.buffer.readline()
    try:
        req = json.loads(raw.decode("utf-8", "surrogateescape"))
        if not isinstance(req, dict):
            raise ValueError("not an object")
    except ValueError as e:
        _send(_fail("bad-request", "the request is not a JSON object: %s" % e))
        return 2
    if req.get("op") != "tail":
        _send(_fail("bad-request", "unknown op %r (known: tail)" % (req.get("op"),)))
        return 2
    lines = max(0, min(int(req.get("lines") or 40), MAX_LINES))
    try:
        run = resolve(req)
    except LookupError as e:
        _send(_fail("no-run", str(e)))
        return 0
    path = os.path.join(run, LOG)
    try:
        fd, st = _open(path)
    except LookupError as e:
        code, message = e.args if len(e.args) == 2 else ("unreadable", str(e))
        _send(_fail(code, message))
        return 0
    text, offset = tail_text(fd, st.st_size, lines)
    _send({"ok": True, "path": path, "text": text, "offset": offset})
    if not req.get("follow"):
        return 0
    ino = st.st_ino
    while True:
        time.sleep(POLL_S)
        try:
            now = os.stat(path, follow_symlinks=False)
        except OSError:
            continue   # rotated away for a moment: wait for the new one
        if now.st_ino != ino or now.st_size < offset:
            os.close(fd)
            try:
                fd, st = _open(path)
            except LookupError:
                continue
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
