"""What starts a helper on a host: the fixed boot line (`BOOT`, with its `WATCHDOG`), the
argv that runs it (`helper_argv`), and what is fed to it on stdin: helper source text
(`helper_stdin`), or a bundled helper's `bundle.Payload` behind the host's loader
(`host/lib/payload`), named by its sha256 when the host may have it cached, compressed when it
is sent (`payload_stdin`). The source never passes through a shell and the request is JSON on
stdin; what comes back is read in channel.py.
"""

from __future__ import annotations

import ast
import functools

from fleetdeck.backend.fleet.link.bundle import Payload, bundle
from fleetdeck.backend.host.lib import payload as host_payload
from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.procfs import HELPER_ENV

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


def helper_stdin(source: str) -> bytes:
    """The bytes that make BOOT run `source`: helper source text, or the name of a helper
    module (`fleetdeck.backend.host.purge`), bundled with the host library."""
    if "\n" not in source and source.startswith("fleetdeck."):
        source = bundle(source)
    src = source.encode()
    return str(len(src)).encode() + b"\n" + src


def _compact(source: str) -> str:
    """`source` without its docstrings and comments (the same code, a third of the bytes)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.unparse(tree) + "\n"


@functools.cache
def loader_source() -> str:
    """The host's loader (`host/lib/payload`), sent ahead of every payload frame and run by
    BOOT as plain source: about 10 KB."""
    return _compact(host_payload.__loader__.get_source(host_payload.__name__))  # type: ignore[union-attr]


def payload_stdin(p: Payload, cached: bool, keep: bool = True) -> bytes:
    """The bytes that make BOOT run payload `p` through the host's loader: with `cached`, its
    name alone (the loader answers `is_missing` when it does not have it); else the payload
    compressed, kept in the host's cache when `keep`."""
    head = helper_stdin(loader_source())
    if cached:
        return head + b"c %s\n" % p.sha256.encode()
    return (
        head
        + b"p %s %d %d %d\n" % (p.sha256.encode(), len(p.data), len(p.packed), int(keep))
        + p.packed
    )


def helper_argv(
    python: str, args: list[str] | None = None, become: str | None = None, local: bool = False
) -> list[str]:
    """argv of a helper on a host: `env` puts the helper marker in its environment (so that a
    trainer a launch starts can drop it; it proves nothing). With `local`, the controller's own
    pid and start time ride on argv (`procfs.SESSION_ARG`): on the `local` host the helpers
    descend from the controller itself, and that is how the probe knows them
    (`procfs.session`); over SSH they descend from their connection's sshd. With
    `become = "sudo"` it runs through `sudo -n` (never a password prompt: a sudo that asks for
    one fails at once, and that failure is named `sudo-password`)."""
    extra = procfs.session_argv() if local else []
    argv = ["env", f"{HELPER_ENV}=1", python, "-c", BOOT, *(args or []), *extra]
    return ["sudo", "-n", "--", *argv] if become == "sudo" else argv


__all__ = [
    "BOOT",
    "BOOT_MARKER",
    "WATCHDOG",
    "helper_argv",
    "helper_stdin",
    "loader_source",
    "payload_stdin",
]
