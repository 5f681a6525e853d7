"""Helpers on a host: the boot line that runs a stdlib payload fed on stdin, its watchdog, and
the streams of a long-lived helper.

What runs on a host is a helper payload (`bundle.bundle`) sent through BOOT: the source never
passes through a shell and the request is JSON on stdin.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from .bundle import bundle
from .hostlib.procfs import HELPER_ENV
from .hostlib.text import shown

# A helper tied to its reader (`--resident`, or `--tied` for the one-shot helpers of
# `run_helper`) must not outlive the controller that reads it: a thread blocks in poll() on
# its stdout, which reports an error once the reading end is closed (the channel closed after
# a timeout, the connection lost), and then kills the helper's descendants (read from
# /proc/PID/task/*/children: a process group would miss those that started their own session,
# and could hold the shell that started the helper) and the helper itself, however stuck.
WATCHDOG = (
    "import os,select,threading\n"
    "def _fleetdeck_kids(q):\n"
    " out=[]\n"
    " try:ts=os.listdir('/proc/%d/task'%q)\n"
    " except OSError:return out\n"
    " for t in ts:\n"
    "  try:\n"
    "   with open('/proc/%d/task/%s/children'%(q,t)) as f:out+=[int(x) for x in f.read().split()]\n"
    "  except (OSError,ValueError):pass\n"
    " return out\n"
    "def _fleetdeck_watch():\n"
    " p=select.poll();p.register(1,0)\n"
    " while not p.poll():pass\n"
    " todo=[os.getpid()];seen=[]\n"
    " while todo:\n"
    "  for k in _fleetdeck_kids(todo.pop()):\n"
    "   if k not in seen:seen.append(k);todo.append(k)\n"
    " for k in seen:\n"
    "  try:os.kill(k,9)\n"
    "  except OSError:pass\n"
    " os.kill(os.getpid(),9)\n"
    "threading.Thread(target=_fleetdeck_watch,daemon=True).start()\n"
)
# Fixed bootstrap: read "<n>\n", then n bytes of Python source, and run it as __main__; what
# follows on stdin is the helper's own input. The marker names the code object of helpers.
BOOT_MARKER = "fleetdeck-helper"
BOOT = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    f"exec({WATCHDOG!r}) if {{'--resident','--tied'}}&set(sys.argv) else None;"
    f"exec(compile(sys.stdin.buffer.read(n),'<{BOOT_MARKER}>','exec'),"
    "{'__name__':'__main__','__builtins__':__builtins__})"
)
STDERR_LIMIT = 4096
SHELL_NOISE = "the login shell printed text before the {what}'s answer: {text}"


class ShellOutputError(ValueError):
    """A helper's stdout began with text that is not its answer (a chatty login shell)."""


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

    def __init__(self, proc: Any, remote: bool, what: str = "helper") -> None:
        self._proc = proc
        self._remote = remote
        self._answered = False
        self.what = what
        self.stdin = proc.stdin
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    async def send_json(self, obj: Any) -> None:
        """Write one JSON line to the helper."""
        self.stdin.write(json.dumps(obj).encode() + b"\n")
        await self.stdin.drain()

    async def recv_json(self) -> Any:
        """Read one JSON line from the helper. EOFError when it exited; ShellOutputError when
        text that is not JSON came before its first answer (a login shell that prints)."""
        line = await self.stdout.readline()
        if not line:
            raise EOFError("helper exited")
        try:
            answer = json.loads(line)
        except ValueError:
            if self._answered:
                raise
            noise = line
            # the rest of the chatter, up to the answer (bounded: a few lines)
            for _ in range(20):
                try:
                    more = await asyncio.wait_for(self.stdout.readline(), 1)
                except TimeoutError:
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
            await asyncio.wait_for(drain(), 2)
        except (TimeoutError, Exception):
            pass
        return bounded_text(b"".join(chunks), limit)

    def close(self) -> None:
        """Stop the helper now: killed locally; remotely its channel is closed, which ends a
        resident helper on the host (see WATCHDOG), however busy it is."""
        try:
            if self._remote:
                self._proc.close()
            elif self._proc.returncode is None:
                # its own session (start_new_session): the group holds its children too
                os.killpg(self._proc.pid, 9)
        except (ProcessLookupError, OSError):
            pass

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the helper to exit; its exit status."""
        if self._remote:
            await asyncio.wait_for(self._proc.wait_closed(), timeout)
            return self._proc.exit_status
        return await asyncio.wait_for(self._proc.wait(), timeout)


def helper_stdin(source: str) -> bytes:
    """The bytes that make BOOT run `source`: helper source text, or the name of a helper
    module (`fleetdeck.backend.actions.purge_remote`), bundled with the host library."""
    if "\n" not in source and source.startswith("fleetdeck."):
        source = bundle(source)
    src = source.encode()
    return str(len(src)).encode() + b"\n" + src


def helper_argv(python: str, args: list[str] | None = None) -> list[str]:
    """argv of a helper on a host: `env` puts the helper marker in its environment, where the
    probe reads it (/proc/PID/environ) to tell fleetdeck's own processes from the user's."""
    return ["env", f"{HELPER_ENV}=1", python, "-c", BOOT, *(args or [])]
