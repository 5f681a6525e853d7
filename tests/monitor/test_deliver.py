"""Hook delivery against real peers: HTTP servers on loopback that drip, blackhole, redirect and
fail; command hooks that background children and hang; hostile host values in every sink."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.monitor.delivery.attempts import post_json, run_hook
from fleetdeck.backend.monitor.delivery.deliver import Deliverer
from fleetdeck.backend.monitor.delivery.payloads import (
    hook_argv,
    json_safe,
    transition_id,
    webhook_body,
)
from fleetdeck.backend.monitor.rules.alerts import Alert

from support.http_peers import Peer

T0 = 1_800_000_000.0


def alert(i: int = 0, **kw) -> Alert:
    d = {
        "rule": "host-down",
        "host": f"h{i}",
        "subject": f"h{i}",
        "state": "firing",
        "since": T0 + i,
        "text": f"h{i} has not answered",
    }
    d.update(kw)
    return Alert(**d)


@pytest.fixture
def receiver():
    """A real HTTP peer on loopback (`support.http_peers.Peer`): `r.got` holds each request as
    (method, path, headers, JSON body); it answers `r.plan(path, n)` (n: requests so far, this
    one included), 204 unless a test says otherwise."""
    r = SimpleNamespace(got=[], plan=lambda path, n: (204, {}))

    def plan(method: str, path: str, headers: dict, body: bytes):
        r.got.append((method, path, headers, json.loads(body)))
        status, answer_headers = r.plan(path, len(r.got))
        return status, answer_headers, b""

    peer = Peer(plan)
    yield peer.url, r
    peer.close()


class Stalling:
    """A TCP server that accepts and then either says nothing (a blackhole) or sends an HTTP
    head one byte at a time, a byte every `drip` seconds, forever. Notes when each connection came."""

    def __init__(self, drip: float | None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.drip = drip
        self.accepted: list[float] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        with self.lock:
            self.accepted.append(time.monotonic())
        try:
            if self.drip is not None:
                c.sendall(b"HTTP/1.1 200 OK\r\n")
            while not self.stop.is_set():
                time.sleep(self.drip or 0.05)
                if self.drip is not None:
                    c.sendall(b"X")
                else:
                    try:
                        if c.recv(65536, socket.MSG_DONTWAIT) == b"":
                            break  # the client gave up
                    except BlockingIOError:
                        pass
        except OSError:
            pass
        finally:
            c.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


async def test_a_dripping_webhook_is_cut_at_the_whole_delivery_deadline():
    srv = Stalling(drip=0.2)
    try:
        t0 = time.monotonic()
        out = await post_json(srv.url, b"{}", {}, deadline=1.0)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert not out.ok and out.retry and "did not answer within 1s" in out.warning
    assert took < 30  # per-read timeouts would never end: the drip resets them forever


async def test_a_blackholed_endpoint_costs_its_deadline_side_by_side_not_one_after_another():
    srv = Stalling(drip=None)
    warnings: list[str] = []
    d = Deliverer(
        None, srv.url, webhook_timeout=1.0, concurrency=4, warn=warnings.append, group_wait=0
    )
    try:
        d.enqueue([alert(i) for i in range(12)])
        await d.drain()
    finally:
        srv.close()
    # four at a time, side by side (one after another, each would come a deadline after the last)
    at = srv.accepted
    assert len(at) == 12 and max(sum(1 for t in at if s <= t < s + 0.5) for s in at) == 4
    assert len(warnings) == 12 and all("retried in" in w for w in warnings)
    assert len(d.pending) == 12  # every one stays in the outbox for its retry


async def test_a_hook_that_backgrounds_a_child_returns_and_leaves_nothing_behind(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; exit 0"
    t0 = time.monotonic()
    out = await run_hook(["sh", "-c", script], dict(os.environ), b"", deadline=20)
    assert out.ok and time.monotonic() - t0 < 15  # the child's open stderr does not hold it
    child = int(pidfile.read_text())
    await asyncio.sleep(0.2)
    assert not procfs.alive(child)


async def test_at_the_deadline_a_hooks_whole_process_group_is_killed(tmp_path):
    pidfile = tmp_path / "pids"
    script = f"sleep 300 & echo $! > {pidfile}; echo $$ >> {pidfile}; sleep 300"
    out = await run_hook(["sh", "-c", script], dict(os.environ), b"", deadline=1.0)
    assert (
        not out.ok and "did not finish within 1s" in out.warning and "process group" in out.warning
    )
    await asyncio.sleep(0.2)
    pids = [int(x) for x in pidfile.read_text().split()]
    assert len(pids) == 2 and not any(procfs.alive(p) for p in pids)


async def test_a_cancelled_delivery_kills_the_hooks_group(tmp_path):
    pidfile = tmp_path / "pids"
    task = asyncio.ensure_future(
        run_hook(
            ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; sleep 300"],
            dict(os.environ),
            b"",
            deadline=60,
        )
    )
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert not procfs.alive(int(pidfile.read_text()))


async def test_307_and_308_are_sent_again_as_post_and_302_is_a_failure_that_says_so(receiver):
    base, r = receiver
    r.plan = lambda path, n: {
        "/a": (307, {"Location": "/b"}),
        "/b": (308, {"Location": f"{base}/c"}),
        "/old": (302, {"Location": "/c"}),
    }.get(path, (204, {}))
    body = webhook_body(alert())
    out = await post_json(f"{base}/a", body, {"X-Fleetdeck-Delivery": "x1"}, deadline=10)
    assert out.ok
    assert [(m, p) for m, p, _, _ in r.got] == [("POST", "/a"), ("POST", "/b"), ("POST", "/c")]
    assert r.got[-1][3] == json.loads(body) and r.got[-1][2]["X-Fleetdeck-Delivery"] == "x1"
    r.got.clear()
    out = await post_json(f"{base}/old", body, {}, deadline=10)
    assert not out.ok and not out.retry
    assert "302" in out.warning and "307 and 308" in out.warning and "not delivered" in out.warning
    assert [(m, p) for m, p, _, _ in r.got] == [("POST", "/old")]  # never a body-less GET


async def test_a_retry_carries_the_same_id_in_body_and_headers(receiver):
    base, r = receiver
    r.plan = lambda path, n: (503, {}) if n == 1 else (204, {})
    warnings: list[str] = []
    d = Deliverer(None, f"{base}/hook", retry_first=0.1, warn=warnings.append, group_wait=0)
    a = alert()
    d.enqueue([a])
    task = asyncio.ensure_future(d.run())
    try:
        for _ in range(200):
            if not d.pending:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not d.pending and d.delivered == 1 and len(warnings) == 1 and "HTTP 503" in warnings[0]
    ids = [(h["Idempotency-Key"], h["X-Fleetdeck-Delivery"], b["id"]) for _, _, h, b in r.got]
    assert len(ids) == 2 and len({x for t in ids for x in t}) == 1 and ids[0][0] == transition_id(a)


async def test_an_entry_survives_in_the_outbox_and_is_delivered_once_by_the_next_deliverer(
    receiver,
):
    base, r = receiver
    first = Deliverer(("/nonexistent-before", "{id}"), f"{base}/hook")
    first.enqueue([alert(1), alert(1)])  # the same transition twice: queued once per sink
    saved = json.loads(json.dumps(first.to_state()))
    assert len(saved) == 2
    second = Deliverer(None, f"{base}/hook")
    second.load_state(saved)  # the command sink is no longer configured
    await second.drain()
    assert len(r.got) == 1 and r.got[0][3]["id"] == transition_id(alert(1)) and not second.pending


HOSTILE = {
    "rule": "run-stalled",
    "host": "h1",
    "state": "firing",
    "subject": "/runs/run-\udcff\udcfe\x1b[31mred\x00nul\nline",
    "text": "loss \udc80 is \x07 {title} $(rm -rf ~)",
}


async def test_hostile_strings_and_numbers_reach_every_sink_by_one_rule(tmp_path, receiver):
    base, r = receiver
    log = tmp_path / "hook.json"
    script = tmp_path / "hook.py"
    script.write_text(
        "import json, os, sys\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('FLEETDECK_')}\n"
        f"open({str(log)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'env': env, "
        "'stdin': sys.stdin.buffer.read().decode()}))\n"
    )
    bad = [
        alert(0, since=float("nan"), **HOSTILE),
        alert(1, since=float("inf"), **{**HOSTILE, "state": "resolved"}),
    ]
    warnings: list[str] = []
    d = Deliverer(
        (sys.executable, str(script), "{subject}", "{text}", "{since}", "{id}"),
        f"{base}/hook",
        warn=warnings.append,
        group_wait=0,
    )
    d.enqueue(bad)
    await d.drain()
    assert warnings == [] and not d.pending and len(r.got) == 2
    got = json.loads(log.read_text())
    # argv and environment: shown() text, printable, no NUL, undecodable bytes as \xNN
    subject = "/runs/run-\\xff\\xfe\\x1bred\\x00nul\\nline".replace("\\x1bred", "\\x1b[31mred")
    assert got["argv"][0] == subject and got["env"]["FLEETDECK_SUBJECT"] == subject
    assert got["argv"][1] == "loss \\x80 is \\x07 {title} $(rm -rf ~)"
    assert got["argv"][2] == "" and got["argv"][3] == got["env"]["FLEETDECK_ID"]
    # JSON (webhook body, hook stdin): valid UTF-8, strict JSON, a non-finite number is null
    for doc in [json.loads(got["stdin"]), *(b for _, _, _, b in r.got)]:
        assert (
            doc["since"] is None
            and doc["subject"] == "/runs/run-\\xff\\xfe\x1b[31mred\x00nul\nline"
        )
    raw = json.dumps([b for _, _, _, b in r.got], allow_nan=False)
    raw.encode("utf-8")  # no lone surrogate left anywhere


def test_the_json_rule_for_numbers_and_containers():
    assert json_safe(
        {
            "a": 10**5000,
            "b": -(2**53),
            "c": 2**53 + 1,
            "d": float("-inf"),
            "e": 1.5,
            "f": [True, None, "\udcff"],
            3: "x",
        }
    ) == {
        "a": None,
        "b": -(2**53),
        "c": None,
        "d": None,
        "e": 1.5,
        "f": [True, None, "\\xff"],
        "3": "x",
    }


def test_placeholders_are_replaced_once_and_id_is_one_of_them():
    a = alert(text="text with {title} and {id}")
    argv = hook_argv(("x", "{title}", "[{state}] {text}", "{id}"), a)
    assert argv == [
        "x",
        "ALERT host-down on h0: h0",
        "[firing] text with {title} and {id}",
        transition_id(a),
    ]


async def test_one_alerts_transitions_reach_a_sink_in_order_while_others_go_side_by_side(receiver):
    """The firing of h1 fails once (HTTP 503) and waits for its retry: h1's resolved waits
    behind it, h2's firing does not."""
    base, r = receiver
    r.plan = lambda path, n: (503, {}) if n == 1 else (204, {})
    d = Deliverer(None, f"{base}/hook", retry_first=0.3, concurrency=1, group_wait=0)
    fired = alert(1)
    d.enqueue([fired])
    d.enqueue([alert(1, state="resolved", since=T0 + 99), alert(2)])
    task = asyncio.ensure_future(d.run())
    try:
        for _ in range(200):
            if not d.pending:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    got = [(b["host"], b["state"]) for _, _, _, b in r.got]
    assert got == [("h1", "firing"), ("h2", "firing"), ("h1", "firing"), ("h1", "resolved")]
