"""Who gets into `fleetdeck watch --web`, over real HTTP to a real `watch` process on a local
fleet: the token made once (mode 600, shown once), rotated under a running watch, checked on
every request whatever the path; only GET and HEAD; request heads and connections bounded;
loopback unless told otherwise."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time

import pytest

from fleetdeck.backend.web.access import parse_web_listen
from fleetdeck.backend.web.server import HEAD_LIMIT, MAX_CONNECTIONS

from support.watch import WATCH, local_fleet, state_dir
from support.web import WebWatch


@pytest.fixture
def watch(tmp_path):
    w = WebWatch(local_fleet(tmp_path, tmp_path / "runs"))
    yield w
    w.stop()


def _refusal(got) -> str:
    status, headers, body = got
    code = headers["X-Fleetdeck-Refusal"]
    assert body.decode().startswith(f"{code}: ") and len(body.decode().split()) > 3, body
    return code


def test_the_token_is_made_once_mode_600_and_shown_once(watch, tmp_path):
    path = state_dir() / "web-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == watch.token
    assert sum(watch.token in line for line in watch.lines) == 1
    watch.stop()
    # a second start: the token kept, not shown
    p = subprocess.run(
        [*WATCH, "--hosts", str(tmp_path / "hosts.toml"), "watch", "--web", "0", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert watch.token not in p.stdout and "web-token" in p.stdout, p.stdout
    assert path.read_text().strip() == watch.token


def test_every_path_needs_the_token_and_a_wrong_one_is_refused(watch):
    for path in (
        "",
        "alerts",
        "schedules",
        "run?host=local&path=/x",
        "events",
        "static/web.css",
        "nope",
    ):
        assert watch.get(path)[0] == 401, path
        assert _refusal(watch.get(path)) == "no-token"
    t = watch.token
    wrong = [t[:-1], t + "x", t[::-1], "x" * len(t), "", " ", "\u00e9" * 10, t.upper()]
    for bad in wrong:
        if bad == t:
            continue
        got = watch.get("", token=bad)
        assert got[0] == 401 and _refusal(got) in ("wrong-token", "no-token"), bad
        assert got[1]["WWW-Authenticate"].startswith("Bearer")
    assert watch.get("", Cookie="fleetdeck_web=" + t[:-2] + "zz")[0] == 401
    assert watch.get("", Cookie="fleetdeck_web=" + t)[0] == 200
    status, headers, body = watch.get("", token=t)
    assert status == 200 and b"<!doctype html>" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "unsafe-inline" not in headers["Content-Security-Policy"]
    assert watch.get("nope", token=t)[0] == 404


def test_the_token_in_the_address_becomes_a_cookie_and_leaves_the_address(watch):
    status, headers, _ = watch.get("alerts?token=" + watch.token)
    assert status == 303 and headers["Location"] == "/alerts"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and watch.token in cookie


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head(watch, method):
    for token in (None, watch.token):
        got = watch.get("", token=token, method=method)
        assert got[0] == 405 and _refusal(got) == "method-not-allowed"
        assert got[1]["Allow"] == "GET, HEAD"
    status, _h, body = watch.get("", token=watch.token, method="HEAD")
    assert status == 200 and body == b""


def test_a_rotated_token_locks_the_old_one_out_of_the_running_watch(watch, tmp_path):
    old = watch.token
    p = subprocess.run(
        [*WATCH, "watch", "--rotate-web-token"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    new = p.stdout.strip().rsplit(" ", 1)[1]
    assert new != old and (state_dir() / "web-token").read_text().strip() == new
    assert stat.S_IMODE((state_dir() / "web-token").stat().st_mode) == 0o600
    assert watch.get("", token=old)[0] == 401
    assert watch.get("", token=new)[0] == 200


def test_a_token_file_others_can_read_is_refused_at_start(tmp_path):
    path = state_dir() / "web-token"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a" * 43 + "\n")
    os.chmod(path, 0o644)
    p = subprocess.run(
        [
            *WATCH,
            "--hosts",
            str(local_fleet(tmp_path, tmp_path / "runs")),
            "watch",
            "--web",
            "0",
            "--count",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1 and p.stderr.startswith("fleetdeck: token-file-open: "), p.stderr


def test_a_request_head_past_the_limit_is_refused(watch):
    got = watch.get("", token=watch.token, **{"X-Pad": "p" * (HEAD_LIMIT + 100)})
    assert got[0] == 431 and _refusal(got) == "request-too-large"
    host, port = watch.base[len("http://") :].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET /" + b"a" * (HEAD_LIMIT * 2) + b" HTTP/1.0\r\n\r\n")
        assert b" 431 " in s.recv(4096).split(b"\r\n")[0]


def test_connections_are_bounded_and_a_slot_comes_back(watch):
    host, port = watch.base[len("http://") :].rstrip("/").split(":")
    held = []
    try:
        for _ in range(MAX_CONNECTIONS):
            s = socket.create_connection((host, int(port)), timeout=30)
            s.sendall(
                f"GET /events?view=fleet HTTP/1.0\r\nAuthorization: Bearer {watch.token}\r\n\r\n".encode()
            )
            assert s.recv(12) == b"HTTP/1.0 200"
            held.append(s)
        got = watch.get("", token=watch.token)
        assert got[0] == 503 and _refusal(got) == "too-many-connections"
    finally:
        for s in held:
            s.close()
    end = time.monotonic() + 60
    while watch.get("", token=watch.token)[0] != 200:
        assert time.monotonic() < end, "no slot came back"
        time.sleep(0.5)


@pytest.mark.parametrize(
    "text, want",
    [
        ("8080", ("127.0.0.1", 8080)),
        (":8080", ("127.0.0.1", 8080)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("[::1]:9", ("::1", 9)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_loopback_unless_told_otherwise(text, want):
    assert parse_web_listen(text) == want


@pytest.mark.parametrize("text", ["", "x", "1:2:x", "70000", "host:-1"])
def test_bad_listen_addresses(text):
    with pytest.raises(ValueError):
        parse_web_listen(text)
