"""The web view's HTTP server: the standard library's `ThreadingHTTPServer` in a thread beside
the monitor (as `/metrics` is served), answering GET and HEAD only, each request with the token.

What it refuses, each with a reason code (the `X-Fleetdeck-Refusal` header and the body's first
word) and a sentence: a method other than GET or HEAD (405 `method-not-allowed`, before
anything else: it never depends on the secret), no token (401 `no-token`), a wrong one (401
`wrong-token`), a request head past `HEAD_LIMIT` bytes (431 `request-too-large`), a connection
past `MAX_CONNECTIONS` (503 `too-many-connections`), anything else (404 `not-found`). A request
body is never read. A client that sends nothing, or reads nothing, is dropped after
`IO_TIMEOUT` seconds.

The token may come as `?token=` (once: the answer sets it as an HttpOnly, SameSite=Strict cookie
and sends the browser on without it in the address), as that cookie, or as
`Authorization: Bearer`. Every answer carries a strict Content-Security-Policy: scripts, styles
and connections from this origin only, no inline script or style, no frames, no forms.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fleetdeck.backend.web.access import TokenCheck
from fleetdeck.backend.web.lists import alerts_body, schedules_body
from fleetdeck.backend.web.pages import esc, fleet_body, frame, run_body, url
from fleetdeck.backend.web.view_state import Seen, ViewState

#: bytes of request line and headers read at most
HEAD_LIMIT = 8192
#: connections served at once (each open page holds one for its event stream)
MAX_CONNECTIONS = 32
#: seconds a client may take to send its request or to read a part of the answer
IO_TIMEOUT = 10.0
#: seconds between keep-alive comments on an idle event stream, and an event stream's life
#: (the browser opens a new one at once, so none is held for ever)
KEEPALIVE_S = 15.0
STREAM_MAX_S = 3600.0
COOKIE = "fleetdeck_web"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_HERE = Path(__file__).parent
STATIC = {
    "/static/web.css": ("text/css; charset=utf-8", (_HERE / "web.css").read_bytes()),
    "/static/live.js": ("text/javascript; charset=utf-8", (_HERE / "live.js").read_bytes()),
}
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"X-Fleetdeck-Refusal: too-many-connections\r\nConnection: close\r\n\r\n"
    b"too-many-connections: every connection the web view serves at once is in use\n"
)


class _Bounded:
    """The request's input, ended after `limit` bytes; `over` once a read wanted more."""

    def __init__(self, raw: Any, limit: int) -> None:
        self.raw, self.left, self.over = raw, limit, False

    def readline(self, size: int = -1) -> bytes:
        cap = self.left if size is None or size < 0 else min(size, self.left)
        if cap <= 0:
            self.over = True
            return b""
        line = self.raw.readline(cap)
        self.left -= len(line)
        if self.left <= 0 and not line.endswith(b"\n"):
            self.over = True
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _views(query: dict[str, list[str]]) -> tuple[str, str, Callable[[Seen], str]] | None:
    """(title, the drawing's key, what draws it) for a view named in `query`, or None."""
    view = (query.get("view") or ["fleet"])[0]
    if view == "fleet":
        return "Fleet", "fleet", fleet_body
    if view == "alerts":
        return "Alerts", "alerts", alerts_body
    if view == "schedules":
        return "Schedules", "schedules", schedules_body
    if view == "run":
        host, path = (query.get("host") or [""])[0], (query.get("path") or [""])[0]
        return "Run", f"run\0{host}\0{path}", lambda seen: run_body(seen, host, path)
    return None


PAGES = {"/": "fleet", "/alerts": "alerts", "/schedules": "schedules", "/run": "run"}


class Handler(BaseHTTPRequestHandler):
    """One request: checked, then a page, an asset or an event stream."""

    server: WebServer
    server_version = "fleetdeck"
    sys_version = ""
    protocol_version = "HTTP/1.0"
    timeout = IO_TIMEOUT

    def setup(self) -> None:
        super().setup()
        self.rfile = _Bounded(self.rfile, HEAD_LIMIT)  # type: ignore[assignment]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # watch's output is its transitions and warnings, not an access log

    def parse_request(self) -> bool:
        ok = super().parse_request()
        # an HTTP/0.9 answer has no status line nor headers: every answer here has both
        self.request_version = self.protocol_version
        if getattr(self.rfile, "over", False):
            self.close_connection = True
            self.refuse(431, "request-too-large", f"a request's head is held to {HEAD_LIMIT} bytes")
            return False
        if ok and self.command not in ("GET", "HEAD"):
            self.close_connection = True
            self.refuse(
                405,
                "method-not-allowed",
                "the web view is read-only: GET and HEAD only",
                {"Allow": "GET, HEAD"},
            )
            return False
        return ok

    # -- answers --------------------------------------------------------------------------------
    def _head(
        self, status: int, ctype: str, length: int | None, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for k, v in {**HEADERS, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()

    def _body(self, data: bytes) -> None:
        if self.command != "HEAD":
            self.wfile.write(data)

    def refuse(
        self, status: int, code: str, sentence: str, extra: dict[str, str] | None = None
    ) -> None:
        """A refusal: its status, its reason code (a header and the body's first word) and why."""
        body = f"{code}: {sentence}\n".encode()
        self._head(
            status,
            "text/plain; charset=utf-8",
            len(body),
            {"X-Fleetdeck-Refusal": code, **(extra or {})},
        )
        self._body(body)

    # -- the token ------------------------------------------------------------------------------
    def _given(self, query: dict[str, list[str]]) -> tuple[str | None, str]:
        """(the token this request gives, where it came from)."""
        if "token" in query:
            return query["token"][0], "query"
        auth = self.headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip(), "header"
        try:
            jar = SimpleCookie(self.headers.get("Cookie", ""))
        except CookieError:
            jar = SimpleCookie()
        if COOKIE in jar:
            return jar[COOKIE].value, "cookie"
        return None, ""

    def _let_in(self, url: Any, query: dict[str, list[str]]) -> bool:
        given, where = self._given(query)
        if given is None:
            self.refuse(
                401,
                "no-token",
                "this page needs the token `fleetdeck watch --web` printed "
                "when it made it (its file is web-token in the state folder)",
                {"WWW-Authenticate": 'Bearer realm="fleetdeck"'},
            )
            return False
        if not self.server.tokens.matches(given):
            gone = {"Set-Cookie": f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"}
            self.refuse(
                401,
                "wrong-token",
                "the token given is not the web view's (it may have been rotated)",
                {"WWW-Authenticate": 'Bearer realm="fleetdeck"', **gone},
            )
            return False
        if where == "query":
            # the token goes into a cookie and out of the address bar, the history and any log
            rest = "&".join(p for p in url.query.split("&") if p and not p.startswith("token="))
            self._head(
                303,
                "text/plain; charset=utf-8",
                0,
                {
                    "Location": url.path + (f"?{rest}" if rest else ""),
                    "Set-Cookie": f"{COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict",
                },
            )
            return False
        return True

    # -- GET and HEAD ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        try:
            query = parse_qs(url.query, max_num_fields=8, errors="surrogateescape")
        except ValueError:
            self.refuse(400, "bad-request", "a query of at most 8 fields is understood")
            return
        if not self._let_in(url, query):
            return
        if url.path in STATIC:
            ctype, data = STATIC[url.path]
            self._head(200, ctype, len(data), {"Cache-Control": "private, max-age=300"})
            self._body(data)
            return
        if url.path == "/events":
            self._events(query)
            return
        view = PAGES.get(url.path)
        got = _views({**query, "view": [view]}) if view else None
        if got is None:
            self.refuse(404, "not-found", "there is no such page")
            return
        self._page(view or "", query, got)

    do_HEAD = do_GET

    def _page(
        self, view: str, query: dict[str, list[str]], got: tuple[str, str, Callable[[Seen], str]]
    ) -> None:
        title, key, draw = got
        state = self.server.state
        seen = state.latest()
        body = self._drawn(seen, key, draw)
        extra = (
            {"host": query["host"][0], "path": query["path"][0]}
            if view == "run" and "host" in query and "path" in query
            else {}
        )
        events = url("/events", view=view, since=str(seen.version), **extra)
        page = frame(title, view, events, body.decode())
        self._head(200, "text/html; charset=utf-8", len(page))
        self._body(page)

    def _drawn(self, seen: Seen, key: str, draw: Callable[[Seen], str]) -> bytes:
        try:
            return self.server.state.drawn(seen, key, lambda s: draw(s).encode())
        except Exception as e:  # a bug in one view is that view's, said on it
            return (
                f'<p class="error">draw-failed: this view could not be drawn from the last poll '
                f"({esc(type(e).__name__)}: {esc(str(e)[:200])})</p>"
            ).encode()

    def _events(self, query: dict[str, list[str]]) -> None:
        got = _views(query)
        if got is None:
            self.refuse(404, "not-found", "there is no such view")
            return
        _title, key, draw = got
        since = self.headers.get("Last-Event-ID") or (query.get("since") or ["0"])[0]
        version = int(since) if since.isdigit() and len(since) < 18 else 0
        self._head(200, "text/event-stream; charset=utf-8", None, {"X-Accel-Buffering": "no"})
        if self.command == "HEAD":
            return
        state = self.server.state
        try:
            self.wfile.write(b"retry: 3000\n\n")
            waited = 0.0
            while waited < STREAM_MAX_S and not self.server.closing.is_set():
                seen = state.wait_newer(version, KEEPALIVE_S)
                if seen.version <= version:
                    waited += KEEPALIVE_S
                    self.wfile.write(b": still here\n\n")
                    continue
                body = self._drawn(seen, key, draw)
                lines = b"".join(b"data: " + ln + b"\n" for ln in body.splitlines())
                self.wfile.write(b"id: %d\n%s\n" % (seen.version, lines))
                self.server.count_sent(len(lines))
                version = seen.version
        except (OSError, ValueError):
            pass  # the page went away, or stopped reading for IO_TIMEOUT


class WebServer(ThreadingHTTPServer):
    """The server, its connections bounded by `max_connections`."""

    daemon_threads = True
    request_queue_size = 16

    def __init__(
        self,
        addr: str,
        port: int,
        state: ViewState,
        tokens: TokenCheck,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if ":" in addr:
            self.address_family = socket.AF_INET6
        self.state = state
        self.tokens = tokens
        self.slots = threading.BoundedSemaphore(max_connections)
        self.closing = threading.Event()
        #: event bytes sent, all streams together (benchmarks)
        self.sent = 0
        self._sent_lock = threading.Lock()
        super().__init__((addr, port), Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def count_sent(self, n: int) -> None:
        with self._sent_lock:
            self.sent += n

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # one connection's failure is its own; watch's stderr is for its warnings

    def close(self) -> None:
        """Stop serving; open event streams end at their next wake."""
        self.closing.set()
        self.shutdown()
        self.server_close()


def serve_web(
    addr: str, port: int, state: ViewState, tokens: TokenCheck | None = None
) -> WebServer:
    """Serve the web view on ADDR:PORT in a thread; the server (`server_address[1]`: the port)."""
    server = WebServer(addr, port, state, tokens or TokenCheck())
    threading.Thread(target=server.serve_forever, name="web-view", daemon=True).start()
    return server


__all__ = [
    "CSP",
    "HEAD_LIMIT",
    "IO_TIMEOUT",
    "MAX_CONNECTIONS",
    "WebServer",
    "serve_web",
]
