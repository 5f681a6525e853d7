"""The one HTTP client of the monitor: every sink that speaks HTTP (the webhook, each
Alertmanager, the silences mirrored there) sends through `request`, over httpx2 (the maintained
httpx line the `mcp` SDK brings), so each gets the same answers to the questions a hand-written
client gets wrong one at a time.

- **Proxies** from the environment, as curl reads them: `HTTP_PROXY`, `HTTPS_PROXY`,
  `ALL_PROXY`, and `NO_PROXY` (hosts, domains, addresses, `*`) naming what goes direct.
- **TLS** verified, always: against the system's certificates, or `SSL_CERT_FILE` /
  `SSL_CERT_DIR` when set. There is no switch to turn it off.
- **Redirects by policy** (`follow`): at most `MAX_REDIRECTS` hops; only 307 and 308 are
  followed, the two that keep the method and the body (a 301, 302 or 303 would turn a POST
  into a body-less GET); to the same scheme, or from http up to https, never from https down to
  http (a downgrade would send the alert in clear text past a proxy or a network that the https
  URL was chosen to avoid). Any other 3xx is the answer, for the sink to judge.
- **Time**: `CONNECT_TIMEOUT` to connect, `READ_TIMEOUT` for each read, and one `deadline`
  over the whole exchange, hops included, so a peer that drips a byte at a time is cut too.
- **Size**: a request body past `REQUEST_LIMIT` is not sent; an answer's head is bounded by the
  HTTP parser (httpcore's h11 connection refuses a head past 100 KiB); its body is read as it
  came (`Accept-Encoding: identity`, so no compressed body grows past its bound when unpacked)
  up to `body_limit` bytes, and the connection is closed there (an endless body costs its
  bound, not the deadline).

A request that policy refuses, and one that gets no answer, raise `HttpFailed` saying why and
whether trying again can help; any answer, of any status, is an `Answer`.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import httpx2

from fleetdeck.backend.host.lib.text import shown

MAX_REDIRECTS = 5
#: the statuses followed: the redirects that keep the method and the body
FOLLOWED = frozenset({307, 308})
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0
#: the largest request body sent (a group of alerts, a batch for Alertmanager, is far smaller)
REQUEST_LIMIT = 8 * 2**20
#: what is read of an answer's body unless the caller says otherwise
BODY_LIMIT = 64 * 1024
USER_AGENT = "fleetdeck-watch"


class HttpFailed(Exception):
    """No answer: the request was refused by policy or never answered. `retry` says whether
    trying again can help (a timeout can; a downgrade, a URL that is not http(s), cannot);
    `deadline` is set when the whole exchange ran out of its deadline."""

    def __init__(self, why: str, *, retry: bool = True, deadline: float | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.retry = retry
        self.deadline = deadline


@dataclass(frozen=True)
class Answer:
    """What came back: its status, the URL that gave it (after the redirects followed), at most
    `body_limit` bytes of its body (`cut`: there was more), and its `Location`, if any."""

    status: int
    url: str
    body: bytes
    cut: bool = False
    location: str = ""
    hops: int = 0

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def follow(url: str, status: int, location: str) -> str | None:
    """The URL a redirect is followed to, by the policy above; None when `status` is not one that
    is followed (the answer stands). HttpFailed when it is one, but to a place not allowed."""
    if status not in FOLLOWED or not location:
        return None
    try:
        there = httpx2.URL(url).join(location)
    except (httpx2.InvalidURL, ValueError) as e:
        raise HttpFailed(
            f"redirected to {shown(location)[:200]}, not a URL ({e})", retry=False
        ) from None
    if there.scheme not in ("http", "https") or not there.host:
        raise HttpFailed(
            f"redirected to {shown(str(there))[:200]}, which is not http(s)", retry=False
        )
    if httpx2.URL(url).scheme == "https" and there.scheme == "http":
        raise HttpFailed(
            f"redirected from https down to http ({shown(str(there))[:200]}): not followed",
            retry=False,
        )
    return str(there)


@lru_cache(maxsize=4)
def _tls(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    # built once per certificate setting (loading a system store costs milliseconds per request)
    del cafile, capath  # the key: create_ssl_context reads the same variables
    return httpx2.create_ssl_context(verify=True, trust_env=True)


def _client(deadline: float) -> httpx2.AsyncClient:
    read = min(READ_TIMEOUT, deadline)
    tls = _tls(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    return httpx2.AsyncClient(
        trust_env=True,
        verify=tls,
        follow_redirects=False,
        timeout=httpx2.Timeout(read, connect=min(CONNECT_TIMEOUT, deadline)),
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
    )


async def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    deadline: float,
    body_limit: int = BODY_LIMIT,
    read_ok: bool = True,
) -> Answer:
    """One exchange by the policy of the module docstring, within `deadline` seconds. The
    answer's body is read up to `body_limit` bytes (0: not at all), and for a 2xx answer only
    when `read_ok` (a sink that needs no more than the status is done at the answer's head, so a
    peer that sends its head and then stalls costs nothing)."""
    if body is not None and len(body) > REQUEST_LIMIT:
        raise HttpFailed(
            f"the request is {len(body)} bytes, past the {REQUEST_LIMIT} sent", retry=False
        )
    sent = dict(headers or {})
    if body is not None:
        sent.setdefault("Content-Type", "application/json")
    try:
        async with asyncio.timeout(deadline):
            async with _client(deadline) as client:
                return await _exchange(client, method, url, body, sent, body_limit, read_ok)
    except TimeoutError:
        raise HttpFailed(f"no answer within {deadline:g}s", deadline=deadline) from None
    except httpx2.TimeoutException as e:
        raise HttpFailed(f"no answer in time ({type(e).__name__})") from None
    except (httpx2.UnsupportedProtocol, httpx2.InvalidURL) as e:
        raise HttpFailed(f"not an http(s) URL: {shown(url)[:200]} ({e})", retry=False) from None
    except (httpx2.HTTPError, OSError, ssl.SSLError) as e:
        raise HttpFailed(shown(str(e) or type(e).__name__)[:300]) from None


async def _exchange(
    client: httpx2.AsyncClient,
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    body_limit: int,
    read_ok: bool,
) -> Answer:
    for hop in range(MAX_REDIRECTS + 1):
        if httpx2.URL(url).scheme not in ("http", "https"):
            raise HttpFailed(f"not an http(s) URL: {shown(url)[:200]}", retry=False)
        async with client.stream(method, url, content=body, headers=headers) as r:
            location = r.headers.get("location", "")
            there = follow(url, r.status_code, location)
            if there is not None:
                url = there
                continue
            ok = 200 <= r.status_code < 300
            got, cut = await _read(r, body_limit if read_ok or not ok else 0)
            return Answer(r.status_code, url, got, cut, location, hop)
    raise HttpFailed(f"more than {MAX_REDIRECTS} redirects", retry=False)


async def _read(r: httpx2.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the body; True when more came (the rest is never read: leaving
    the stream closes the connection)."""
    parts: list[bytes] = []
    size = 0
    if limit <= 0:
        return b"", False
    async for chunk in r.aiter_raw():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(parts)[:limit], True
    return b"".join(parts), False


__all__ = [
    "BODY_LIMIT",
    "CONNECT_TIMEOUT",
    "FOLLOWED",
    "MAX_REDIRECTS",
    "READ_TIMEOUT",
    "REQUEST_LIMIT",
    "Answer",
    "HttpFailed",
    "follow",
    "request",
]
