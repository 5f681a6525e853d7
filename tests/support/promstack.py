"""Real Alertmanager and Prometheus for tests: Debian's binaries on loopback, each on a free port
with its own config and storage under the test's folder; a webhook receiver the test serves; a
TCP forwarder that can cut the line to a real peer and mend it (a partition, not a stub)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


def need(binary: str) -> str:
    """The binary's path, or the test is skipped naming the package the README installs."""
    if not (os.path.exists(binary) and os.access(binary, os.X_OK)):
        pytest.skip(
            f"{binary} is not installed (apt-get install prometheus prometheus-alertmanager)"
        )
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: Callable[[], Any], deadline_s: float = 120, why: str = "") -> Any:
    """Poll `what` until it is truthy (its value) or the generous deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = what()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {why or what}")


def get_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def post_json(url: str, doc: Any, timeout: float = 10) -> Any:
    req = urllib.request.Request(
        url, json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if body else None


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


class Receiver:
    """An HTTP server taking Alertmanager's webhook posts: `.posts` holds each body, parsed."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                owner.posts.append(json.loads(self.rfile.read(n)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str | None = None, **labels: str) -> list[dict]:
        """Every alert in every notification so far (with that status, whose labels hold `labels`)."""
        return [
            a
            for p in list(self.posts)
            for a in p.get("alerts", ())
            if (status is None or a.get("status") == status)
            and all(a.get("labels", {}).get(k) == v for k, v in labels.items())
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


AM_CONFIG = """route:
  receiver: test
  group_by: [alertname, host, subject]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: {url}
        send_resolved: true
"""


class Alertmanager:
    """A real Alertmanager on 127.0.0.1:`port` (free unless given), storage under `folder`,
    notifying `receiver_url` at once (group_wait 1s), clustering off."""

    def __init__(self, folder: Path, receiver_url: str, port: int | None = None) -> None:
        need(ALERTMANAGER)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "alertmanager.yml").write_text(AM_CONFIG.format(url=receiver_url))
        self.log = open(folder / "alertmanager.log", "ab")  # noqa: SIM115
        self.p = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={folder / 'alertmanager.yml'}",
                f"--storage.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.folder = folder
        wait_for(
            lambda: self.p.poll() is not None or answers(f"{self.url}/-/ready"),
            why="alertmanager ready",
        )
        if self.p.poll() is not None:
            raise AssertionError(
                f"alertmanager ended: {(folder / 'alertmanager.log').read_text()[-2000:]}"
            )

    def alerts(self) -> list[dict]:
        return get_json(f"{self.url}/api/v2/alerts")

    def silence(self, comment: str, **labels: str) -> str:
        now = time.time()
        doc = {
            "matchers": [
                {"name": k, "value": v, "isRegex": False, "isEqual": True}
                for k, v in labels.items()
            ],
            "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60)),
            "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 7200)),
            "createdBy": "tests",
            "comment": comment,
        }
        return post_json(f"{self.url}/api/v2/silences", doc)["silenceID"]

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Forwarder:
    """127.0.0.1:`port` forwarded to `upstream`; `cut()` makes it take each connection and close
    it at once (the far side unreachable), `mend()` forwards again."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.open = True
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        #: connections taken, and of those closed unanswered (cut, or nothing behind it)
        self.accepted = 0
        self.refused = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def cut(self) -> None:
        self.open = False

    def mend(self) -> None:
        self.open = True

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if not self.open:
                self.refused += 1
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
            except OSError:
                self.refused += 1
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.sock.close()


def promtool() -> str:
    return need(shutil.which("promtool") or PROMTOOL)
