"""The monitor's one HTTP client against real peers on loopback: a forward proxy named by
HTTP_PROXY (and NO_PROXY going around it), TLS peers with a certificate the client trusts or
not, redirects followed by policy and a downgrade refused, an endless body cut at its bound, a
silent peer that costs its own deadline and holds up no other sink, and Alertmanager URLs whose
query string reaches the server."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from fleetdeck.backend.monitor.alertmanager.post import post_json as am_post
from fleetdeck.backend.monitor.alertmanager.silences import SilenceSync
from fleetdeck.backend.monitor.alertmanager.sink import AlertmanagerSink
from fleetdeck.backend.monitor.delivery.attempts import post_json
from fleetdeck.backend.monitor.delivery.deliver import Deliverer
from fleetdeck.backend.monitor.delivery.http_client import REQUEST_LIMIT, HttpFailed, request
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import Silence

from support.http_peers import Peer, Proxy, Raw, self_signed

T0 = 1_800_000_000.0
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def alert(i: int = 0) -> Alert:
    return Alert("host-down", f"h{i}", f"h{i}", "firing", T0 + i, f"h{i} has not answered")


@pytest.fixture
def peers():
    made: list = []

    def make(kind, *a, **kw):
        p = kind(*a, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def no_proxy_env(monkeypatch):
    for v in PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
        monkeypatch.delenv(v.upper(), raising=False)
    return monkeypatch


async def test_http_proxy_from_the_environment_carries_the_request(peers, no_proxy_env):
    target, proxy = peers(Peer), peers(Proxy)
    no_proxy_env.setenv("HTTP_PROXY", proxy.url)
    out = await post_json(f"{target.url}/hook?k=v", b'{"a": 1}', {"X-Id": "i1"}, deadline=10)
    assert out.ok, out.warning
    assert proxy.seen == [("POST", f"{target.url}/hook?k=v")]  # the absolute form: a proxy's
    assert [(m, p, b) for m, p, _, b in target.got] == [("POST", "/hook?k=v", b'{"a": 1}')]
    assert target.got[0][2]["X-Id"] == "i1"


async def test_no_proxy_sends_the_host_it_names_direct(peers, no_proxy_env):
    target, proxy = peers(Peer), peers(Proxy)
    no_proxy_env.setenv("HTTP_PROXY", proxy.url)
    no_proxy_env.setenv("NO_PROXY", "example.org,127.0.0.1")
    out = await post_json(f"{target.url}/hook", b"{}", {}, deadline=10)
    assert out.ok, out.warning
    assert proxy.seen == [] and [p for _, p, _, _ in target.got] == ["/hook"]


async def test_a_proxy_that_is_down_is_a_failure_retried_not_a_direct_request(peers, no_proxy_env):
    target, gone = peers(Peer), peers(Proxy)
    no_proxy_env.setenv("HTTP_PROXY", gone.url)
    gone.close()
    out = await post_json(f"{target.url}/hook", b"{}", {}, deadline=10)
    assert not out.ok and out.retry and target.got == []


async def test_tls_is_verified_and_a_trusted_certificate_is_taken(peers, tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path)
    tls = peers(Peer, tls=(cert, key))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
    (tmp_path / "none.pem").write_text("")
    with pytest.raises(HttpFailed) as no:
        await request("POST", f"{tls.url}/hook", body=b"{}", deadline=10)
    assert no.value.retry and tls.got == []  # never sent over a connection it could not verify
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    got = await request("POST", f"{tls.url}/hook", body=b"{}", deadline=10)
    assert got.status == 200 and [p for _, p, _, _ in tls.got] == ["/hook"]


async def test_a_redirect_is_followed_up_to_https_and_a_downgrade_to_http_is_refused(
    peers, tmp_path, monkeypatch
):
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    plain = peers(Peer)
    tls = peers(Peer, tls=(cert, key))
    plain.plan = lambda m, path, h, b: (
        (307, {"Location": f"{tls.url}/up"}, b"") if path == "/start" else (204, {}, b"")
    )
    tls.plan = lambda m, path, h, b: (
        (308, {"Location": f"{plain.url}/down"}, b"") if path == "/leave" else (204, {}, b"")
    )
    got = await request("POST", f"{plain.url}/start", body=b'{"n": 1}', deadline=10)
    assert got.status == 204 and got.url == f"{tls.url}/up" and got.hops == 1
    assert [(m, p, b) for m, p, _, b in tls.got] == [("POST", "/up", b'{"n": 1}')]  # still a POST

    plain.got.clear()
    out = await post_json(f"{tls.url}/leave", b"{}", {}, deadline=10)
    assert not out.ok and not out.retry and "https down to http" in out.warning
    assert plain.got == []  # the alert never went out in clear text


async def test_a_302_is_not_followed_and_a_loop_ends_at_the_hop_limit(peers):
    p = peers(Peer)
    p.plan = lambda m, path, h, b: (
        (302, {"Location": "/elsewhere"}, b"")
        if path == "/found"
        else (307, {"Location": path}, b"")
    )
    got = await request("POST", f"{p.url}/found", body=b"{}", deadline=10)
    assert got.status == 302 and got.location == "/elsewhere" and len(p.got) == 1
    p.got.clear()
    with pytest.raises(HttpFailed) as loop:
        await request("POST", f"{p.url}/loop", body=b"{}", deadline=10)
    assert not loop.value.retry and "more than 5 redirects" in loop.value.why
    assert len(p.got) == 6  # the first request and five hops, no more


async def test_an_endless_body_is_cut_at_its_bound_and_the_connection_closed(peers):
    raw = peers(Raw, endless=True)
    got = await request("POST", f"{raw.url}/x", body=b"{}", deadline=60, body_limit=10_000)
    assert got.status == 500 and got.cut and len(got.body) == 10_000
    assert await asyncio.to_thread(raw.gone.wait, 30)  # the client hung up: reading stopped there
    status, said = await am_post(f"{raw.url}/api/v2/alerts", b"[]", deadline=60)
    assert status == 500 and said.startswith("HTTP 500: xxx") and len(said) <= 320


async def test_a_webhook_or_alertmanager_that_stalls_after_a_2xx_head_has_taken_it(peers):
    # the status is the answer: a 2xx's body is not waited for (it never comes here)
    stall = peers(Raw, endless=False, status=202, stall=True)
    out = await post_json(f"{stall.url}/hook", b"{}", {}, deadline=30)
    assert out.ok, out.warning
    assert await am_post(f"{stall.url}/api/v2/alerts", b"[]", deadline=30) == (202, "HTTP 202")
    assert stall.accepted == 2


async def test_a_scheme_is_read_as_urls_read_it_and_only_http_s_is_sent(peers):
    p = peers(Peer)
    got = await request("POST", p.url.replace("http://", "HTTP://") + "/x", body=b"{}", deadline=10)
    assert got.status == 200 and [path for _, path, _, _ in p.got] == ["/x"]
    for url in ("ftp://127.0.0.1/x", "file:///etc/passwd", "no url"):
        with pytest.raises(HttpFailed) as no:
            await request("POST", url, body=b"{}", deadline=10)
        assert not no.value.retry and "not an http(s) URL" in no.value.why


async def test_a_request_body_past_the_bound_is_not_sent(peers):
    p = peers(Peer)
    with pytest.raises(HttpFailed) as big:
        await request("POST", f"{p.url}/x", body=b"x" * (REQUEST_LIMIT + 1), deadline=10)
    assert not big.value.retry and p.got == []


async def test_a_silent_webhook_times_out_while_the_command_hook_is_delivered(peers, tmp_path):
    silent = peers(Raw, endless=False)
    out_file = tmp_path / "hook.out"
    warnings: list[str] = []
    d = Deliverer(
        ("sh", "-c", f'cat > "{out_file}"'),
        f"{silent.url}/hook",
        webhook_timeout=1.0,
        warn=warnings.append,
        group_wait=0,
        retry_first=600,
    )
    d.enqueue([alert()])
    task = asyncio.ensure_future(d.run())
    try:
        for _ in range(400):
            if warnings:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert json.loads(out_file.read_text())["host"] == "h0"  # the hook went, untouched by it
    assert [p.sink for p in d.pending.values()] == ["webhook"] and d.delivered == 1
    assert silent.accepted >= 1
    assert len(warnings) == 1 and "did not answer within 1s" in warnings[0]


async def test_a_silent_alertmanager_holds_up_no_other(peers, tmp_path):
    silent, am = peers(Raw, endless=False), peers(Peer)
    warnings: list[str] = []
    sink = AlertmanagerSink(
        [silent.url, am.url], warn=warnings.append, timeout=1.0, path=tmp_path / "am.json"
    )
    sink.update([alert()], [alert()])
    task = asyncio.ensure_future(sink.run())
    try:
        for _ in range(400):
            if warnings and am.got:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [(m, p) for m, p, _, _ in am.got][:1] == [("POST", "/api/v2/alerts")]
    assert am.bodies()[0][0]["labels"]["host"] == "h0"
    assert silent.accepted >= 1
    assert any(w.startswith(f"Alertmanager {silent.url} does not take alerts") for w in warnings)
    assert "no answer within 1s" in warnings[0]


async def test_an_alertmanager_url_keeps_its_query_string(peers, tmp_path):
    am = peers(Peer)
    am.plan = lambda m, path, h, b: (
        (200, {}, b'{"silenceID": "am-1"}') if "/silences" in path else (200, {}, b"")
    )
    base = f"{am.url}/tenant/?token=a%20b&x=1"
    sink = AlertmanagerSink([base], timeout=5.0, path=tmp_path / "am.json")
    sink.update([alert()], [])
    assert await sink.post(sink.targets[0])
    sync = SilenceSync([base], path=tmp_path / "ams.json")
    s = Silence("s1", "h0", None, None, T0, T0 + 3600, "maintenance", "op")
    await sync.sync([s], now=T0 + 1)
    await sync.sync([], now=T0 + 2)
    assert [(m, p) for m, p, _, _ in am.got] == [
        ("POST", "/tenant/api/v2/alerts?token=a%20b&x=1"),
        ("POST", "/tenant/api/v2/silences?token=a%20b&x=1"),
        ("DELETE", "/tenant/api/v2/silence/am-1?token=a%20b&x=1"),
    ]


def test_the_environment_of_this_suite_names_no_proxy():
    # the suite's own loopback peers must not be routed through a proxy the machine sets
    assert not any(os.environ.get(v) or os.environ.get(v.upper()) for v in PROXY_VARS[:3])
