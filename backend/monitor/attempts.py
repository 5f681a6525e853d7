"""One delivery attempt at each sink, within one deadline for all of it, and how it went
(`Outcome`: delivered, or a warning and whether trying again can help).

- **Command hook** (`run_hook`): run in a session of its own; at the deadline its whole process
  group is killed, children it backgrounded included; when it exits before, whatever it left
  running in its group is killed too. A hook that cannot start fails for good.
- **Webhook** (`post_json`): connect, send and the answer's head within the deadline. 2xx is
  delivered; 307 and 308 are followed as POST (up to five hops); any other redirect, and a 4xx
  other than 408/425/429, fail for good.

The retries of a failed attempt are the outbox's (`deliver.Deliverer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass

from fleetdeck.backend.fleet.link.localproc import spawn
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.payloads import arg_text

MAX_REDIRECTS = 5
HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    """How one attempt went: ok, or a warning and whether trying again can help."""

    ok: bool
    warning: str = ""
    retry: bool = True


async def run_hook(argv: list[str], env: dict[str, str], stdin: bytes, deadline: float) -> Outcome:
    """Run a command hook in a session of its own; its whole process group ends when it exits
    or at `deadline` seconds, whichever comes first (and when the caller is cancelled)."""
    name = arg_text(argv[0]) if argv else "?"
    # stderr goes to a file, not a pipe: a child the hook backgrounds keeps a pipe open, and the
    # hook's end would wait for it
    with tempfile.TemporaryFile() as err:
        try:
            # localproc: cancelled while it starts, the child is killed before the
            # cancellation goes on (asyncio's own create_subprocess_exec can leave it running)
            proc = await spawn(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        except (OSError, ValueError) as e:
            return Outcome(
                False,
                f"alert hook {name} could not start: {getattr(e, 'strerror', None) or e}",
                False,
            )

        async def feed_and_wait() -> int:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):  # a hook that ignores stdin may close it
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            with contextlib.suppress(OSError):
                proc.stdin.close()
            return await proc.wait()

        try:
            async with asyncio.timeout(deadline):
                rc = await feed_and_wait()
        except TimeoutError:
            return Outcome(
                False,
                f"alert hook {name} did not finish within {deadline:g}s; its process group "
                "was killed",
            )
        finally:
            _kill_group(proc.pid)  # what it left running in its group goes with it
            try:
                await asyncio.shield(proc.reap())
            finally:
                proc.close()
        if rc:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 2048))
            last = err.read().decode("utf-8", "surrogateescape").strip().splitlines()
            return Outcome(
                False,
                f"alert hook {name} exited {rc}" + (f": {shown(last[-1])[:200]}" if last else ""),
            )
    return Outcome(True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def post_json(url: str, body: bytes, headers: dict[str, str], deadline: float) -> Outcome:
    """POST `body` to `url`, connect, send and the answer's head all within `deadline` seconds.
    2xx is delivered; 307/308 are followed as POST; any other redirect fails for good."""
    try:
        async with asyncio.timeout(deadline):
            return await _post(url, body, headers)
    except TimeoutError:
        return Outcome(False, f"alert webhook {shown(url)} did not answer within {deadline:g}s")


async def _post(url: str, body: bytes, headers: dict[str, str]) -> Outcome:
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            status, head = await _post_once(url, body, headers)
        except (OSError, ValueError, asyncio.IncompleteReadError, ssl.SSLError) as e:
            return Outcome(
                False, f"alert webhook {shown(url)} failed: {shown(str(e) or type(e).__name__)}"
            )
        if 200 <= status < 300:
            return Outcome(True)
        if status in (307, 308) and head.get("location"):
            url = urllib.parse.urljoin(url, head["location"])
            if not url.startswith(("http://", "https://")):
                return Outcome(
                    False, f"alert webhook redirected to {shown(url)}, which is not http(s)", False
                )
            continue
        if 300 <= status < 400:
            return Outcome(
                False,
                f"alert webhook {shown(url)} answered {status} (redirect to "
                f"{shown(head.get('location', '?'))}); only 307 and 308 keep a POST a POST, so the "
                "alert was not delivered: point `webhook` at the final URL",
                False,
            )
        permanent = 400 <= status < 500 and status not in (408, 425, 429)
        return Outcome(False, f"alert webhook {shown(url)} answered HTTP {status}", not permanent)
    return Outcome(False, f"alert webhook {shown(url)}: more than {MAX_REDIRECTS} redirects", False)


async def _post_once(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    port = u.port or (443 if u.scheme == "https" else 80)
    ctx = ssl.create_default_context() if u.scheme == "https" else None
    reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx, limit=HEAD_LIMIT)
    try:
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        if ":" in u.hostname:
            host = f"[{u.hostname}]" + (f":{u.port}" if u.port else "")
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {host}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Connection: close",
            "User-Agent: fleetdeck-watch",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        parts = status_line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        head: dict[str, str] = {}
        size = len(status_line)
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            size += len(line)
            if size > HEAD_LIMIT:
                raise ValueError("answer head too large")
            k, _, v = line.decode("latin-1").partition(":")
            head[k.strip().lower()] = v.strip()
        return int(parts[1]), head
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.5):
                await writer.wait_closed()


__all__ = ["Outcome", "post_json", "run_hook"]
