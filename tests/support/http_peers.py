"""Real HTTP peers on loopback for the monitor's HTTP client: a receiver that records and answers
by plan (plain or TLS), a forward proxy that relays what it is sent, and a raw peer that either
says nothing or answers with an endless body."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: (method, path, headers, body) -> (status, headers, body)
Plan = Callable[[str, str, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


def _ok(method: str, path: str, headers: dict[str, str], body: bytes):
    return 200, {}, b""


class Peer:
    """A threading HTTP server on 127.0.0.1 that records each request as (method, path,
    headers, body) and answers by `plan`; with `tls` (cert, key) it speaks https."""

    def __init__(self, plan: Plan = _ok, tls: tuple[Path, Path] | None = None) -> None:
        self.got: list[tuple[str, str, dict[str, str], bytes]] = []
        self.plan = plan
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                peer.got.append((self.command, self.path, dict(self.headers), body))
                status, headers, out = peer.plan(self.command, self.path, dict(self.headers), body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(out)
                self.close_connection = True

            do_POST = do_GET = do_DELETE = _any

            def log_message(self, *a: Any) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.srv.server_address[1]}"

    def bodies(self) -> list[Any]:
        return [json.loads(b) for _, _, _, b in self.got]

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


class Proxy:
    """A forward HTTP proxy: each request arrives with its absolute URL (recorded in `seen`)
    and is relayed to that URL over a new connection, its answer relayed back."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                proxy.seen.append((self.command, self.path))
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                target = urllib.parse.urlsplit(self.path)
                c = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=10)
                path = target.path + (f"?{target.query}" if target.query else "")
                keep = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("proxy-connection", "connection", "host")
                }
                c.request(self.command, path or "/", body=body, headers=keep)
                r = c.getresponse()
                out = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(out)
                self.close_connection = True
                c.close()

            do_POST = do_GET = do_DELETE = _relay

            def log_message(self, *a: Any) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.srv.server_address[1]}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


class Raw:
    """A TCP peer that reads a request's head and then says nothing (`endless=False`: a
    blackhole), or answers `status` with a chunked body that never ends (`endless=True`), until
    the client goes away; with `stall`, it sends that status's head (promising a body) and then
    nothing. `accepted` counts connections; `gone` is set when a client closed on the endless
    body; `sent` is how many body bytes it wrote."""

    def __init__(self, endless: bool, status: int = 500, stall: bool = False) -> None:
        self.status = status
        self.stall = stall
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.endless = endless
        self.accepted = 0
        self.sent = 0
        self.gone = threading.Event()
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            c.settimeout(0.2)
            head = b""
            while b"\r\n\r\n" not in head and not self.stop.is_set():
                try:
                    got = c.recv(65536)
                except TimeoutError:
                    continue
                if not got:
                    return
                head += got
            if self.stall:
                c.sendall(b"HTTP/1.1 %d X\r\nContent-Length: 100\r\n\r\n" % self.status)
            if not self.endless:
                while not self.stop.is_set():
                    try:
                        if c.recv(65536) == b"":
                            return  # the client gave up
                    except TimeoutError:
                        continue
                return
            c.settimeout(10)
            c.sendall(b"HTTP/1.1 %d Oops\r\nContent-Type: text/plain\r\n" % self.status)
            c.sendall(b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"x" * 16384
            frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
            while not self.stop.is_set():
                c.sendall(frame)
                self.sent += len(chunk)
        except OSError:
            self.gone.set()
        finally:
            c.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
