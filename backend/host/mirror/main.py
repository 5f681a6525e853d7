"""The mirror helper that runs ON a host: stdlib and the host library only, Python 3.8+.

It travels over SSH as a bundle (`fleetdeck.backend.fleet.link.bundle`) and its input is JSON on stdin, so
no path is ever pasted into a shell string. The first line of stdin is the request; every
answer has the host library's one shape (`{..., "ok": true}` or `{"ok": false, "error":
{"code", "message"}}`):

- `list`: every file under a folder (size, mtime_ns, ctime_ns, inode, mode), optionally hashed,
  files in parallel threads (hashlib releases the GIL), plus the folders, symlinks and special
  files found. Without `follow` nothing is followed, the folder itself included; with it,
  links are followed and those pointing outside the folder are named.
- `read`: stream files as frames (4-byte big-endian length, data; length 0 ends a file, then
  one answer line: the sha256 of the bytes read from this disk), then re-check the folder on
  request.
- `write`: receive those frames into a hidden partial folder beside the destination, fsync each
  file, hash it again from this disk, and rename into place only when told to commit. The
  destination's parent is opened once, from / without following a link, and all of this is
  done relative to that descriptor; a parent that became a symlink refuses (`symlink`). Any
  error, an abort, or stdin closing (the controller or its connection died) removes the
  partial folder; a partial left by a writer that is gone is removed by the next writer.

Paths travel as str decoded from the file system's bytes with utf-8/surrogateescape, so any
name (non-UTF-8 bytes included) goes back to the same bytes.

This module answers the request; beside it in this package, `read` holds `list` and `read`,
`write` holds `write` (its partial folder in `partial`, with `replace` and `fdops`),
`abandon` holds `abandon`, `common` what both ends share, `wire` each op's request and
answers as declared. The controller names this
module (its `__name__`) as the helper it sends.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import json
import signal
import sys

from fleetdeck.backend.host.lib import serve
from fleetdeck.backend.host.mirror.abandon import op_abandon
from fleetdeck.backend.host.mirror.common import (
    say,
)
from fleetdeck.backend.host.mirror.read import (
    op_list,
    op_read,
)
from fleetdeck.backend.host.mirror.wire import ABANDON, LIST, READ, WRITE
from fleetdeck.backend.host.mirror.write import op_write

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from types import FrameType
    from typing import Any, Dict, Optional


def _hangup(signum: int, frame: Optional[FrameType]) -> None:
    raise EOFError("signal %d" % signum)


def main() -> None:
    """Read the request line and answer it (streaming ops speak on stdout as they go)."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, _hangup)
    inp = sys.stdin.buffer
    out = sys.stdout.buffer
    ops: Dict[str, Any] = {
        LIST: op_list,
        ABANDON: op_abandon,
        READ: lambda r: op_read(r, inp, out),
        WRITE: lambda r: op_write(r, inp, out),
    }
    try:
        line = inp.readline()
        try:
            req = json.loads(line.decode("utf-8", "surrogateescape"))
        except ValueError as e:
            say(out, serve.error_answer("bad-request", "the request is not JSON: %s" % e))
            return
        say(out, serve.dispatch(ops, req))
    except (EOFError, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
