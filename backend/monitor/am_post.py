"""One bounded POST of a JSON body, as the Alertmanager sink makes it: one deadline over the
connection, the request, the answer's head (at most `HEAD_LIMIT` bytes) and at most
`BODY_LIMIT` bytes of its body; whatever goes wrong is a status 0 and a sentence."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.parse

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.am_format import sentence

HEAD_LIMIT = 64 * 1024
BODY_LIMIT = 4096


async def post_json(url: str, body: bytes, deadline: float) -> tuple[int, str]:
    """POST `body` to `url` within `deadline` seconds: (HTTP status, a sentence saying what
    came back); status 0 when no answer came (the sentence says why)."""
    try:
        async with asyncio.timeout(deadline):
            return await _post(url, body)
    except TimeoutError:
        return 0, f"no answer within {deadline:g}s"
    except asyncio.IncompleteReadError:
        return 0, "the connection closed before a whole answer came"
    except (OSError, ValueError, asyncio.LimitOverrunError, ssl.SSLError) as e:
        return 0, shown(str(e) or type(e).__name__)[:300]


async def _post(url: str, body: bytes) -> tuple[int, str]:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    port = u.port or (443 if u.scheme == "https" else 80)
    ctx = ssl.create_default_context() if u.scheme == "https" else None
    reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx, limit=HEAD_LIMIT)
    try:
        host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
        host += f":{u.port}" if u.port else ""
        head = [
            f"POST {u.path or '/'} HTTP/1.1",
            f"Host: {host}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Connection: close",
            "User-Agent: fleetdeck-watch",
        ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        parts = (await reader.readuntil(b"\r\n")).decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError("the answer is not HTTP")
        size, length = 0, BODY_LIMIT
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            size += len(line)
            if size > HEAD_LIMIT:
                raise ValueError("the answer's head is too large")
            k, _, v = line.decode("latin-1").partition(":")
            if k.strip().lower() == "content-length" and v.strip().isdigit():
                length = min(BODY_LIMIT, int(v.strip()))
        status = int(parts[1])
        text = "" if 200 <= status < 300 else (await reader.read(length)).decode("utf-8", "replace")
        return status, f"HTTP {status}" + (
            f": {sentence(text.strip(), 300)}" if text.strip() else ""
        )
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.5):
                await writer.wait_closed()


__all__ = ["BODY_LIMIT", "HEAD_LIMIT", "post_json"]
