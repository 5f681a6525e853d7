"""A maintenance day, end to end: the monitor `watch` runs (its rules, its outbox with a real hook
process, its Alertmanager sink and silence sync) over a scripted fleet, beside Debian's real
`prometheus-alertmanager` on loopback whose webhook receiver is the test's.

gx10's seat 28003 answers NaN logprobs: its seat-check pages. The operator silences gx10 for
2 h to swap the seat (the window began 2 h before it ends, a minute from the test's start: the
clock is simulated by the silence's start, nothing else). Inside the window run-7 finishes, its
run-finished notice fires and its event hold ends; seat 28004 fails its check during the swap;
both seats are stopped (gone from the listing); gx10 is rebooted and does not answer. Then the window ends, on its own.

What must hold: exactly one run-finished, held then delivered, saying "held since ... by
silence <id>"; no seat page (the seat-check resolve says the seat is gone, and goes as a
resolve); host-down, which began inside the window and still holds, pages once it ends; nothing
lost, nothing doubled; and Alertmanager agrees throughout: its receiver hears nothing of gx10
while the window lasts, and gx10's host-down after it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor import silences as sil
from fleetdeck.backend.monitor.seats import SeatCheck, record_check
from fleetdeck.backend.monitor.service import Monitor

from support.promstack import Alertmanager, Receiver

HOOK = (
    "import json, sys\ndoc = json.loads(sys.stdin.read())\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    for a in doc.get('alerts') or [doc]:\n"
    "        f.write(json.dumps({k: a.get(k) for k in ('state', 'rule', 'host', 'subject', 'text')})"
    " + '\\n')\n"
)
RUN = "/home/op/runs/run-7"
#: how long the window has left when it is made: its start is 2 h minus this before now
LEFT = 60.0


class World:
    """What the scripted fleet shows at the next poll."""

    def __init__(self) -> None:
        self.run_state = "running"
        self.seats = [28003, 28004]
        self.gx10_up = True

    def snapshot(self) -> FleetSnapshot:
        t = time.time()
        run = Run(
            host="gx10",
            path=RUN,
            name="run-7",
            state=self.run_state,
            step=400 if self.run_state == "finished" else 250,
            max_steps=400,
            adapter=f"{RUN}/final_adapter" if self.run_state == "finished" else None,
        )
        seats = tuple(
            Seat(host="gx10", kind="vllm", port=p, pid=p - 28000, restarts=0) for p in self.seats
        )
        gx10 = (
            HostSnapshot("gx10", True, time=t, runs=(run,), seats=seats)
            if self.gx10_up
            else HostSnapshot("gx10", False, time=t, error="connection to gx10 timed out after 5s")
        )
        return FleetSnapshot(hosts=(gx10, HostSnapshot("ana", True, time=t)), time=t)


class Script:
    """The monitor's source: the world as it is at each poll."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def poll(self) -> FleetSnapshot:
        return self.world.snapshot()


async def until(what, seconds: float = 60.0, why: str = ""):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        v = what()
        if v:
            return v
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {why or what}")


def hook_lines(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def of(lines: list[dict], rule: str, state: str | None = None) -> list[dict]:
    return [x for x in lines if x["rule"] == rule and state in (None, x["state"])]


def am_gx10(receiver: Receiver) -> list[tuple[str, str]]:
    return [(a["status"], a["labels"]["alertname"]) for a in receiver.alerts(host="gx10")]


async def test_a_maintenance_day(tmp_path):
    receiver = Receiver()
    am = Alertmanager(tmp_path / "am", receiver.url)
    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    fleet = parse_fleet(
        '[hosts.gx10]\naddress = "gx10"\n[hosts.ana]\naddress = "ana"\n'
        "[alerts]\ngroup_wait = 0\nhost_down_after = 1\n"
        'disabled = ["new-stray", "disk-full-eta", "idle-holder", "gpu-headroom"]\n'
        f'on_alert = ["{sys.executable}", "{tmp_path / "hook.py"}", "{log}"]\n'
        f'alertmanager = ["{am.url}"]\n',
        "hosts.toml",
    )
    # run-finished's event holds 15 minutes; here 5 s, so that it ends inside the window
    fleet = replace(fleet, alerts=replace(fleet.alerts, event_hold_minutes=5 / 60))
    world = World()
    said: list[str] = []
    record_check(
        SeatCheck(
            "gx10", 28003, False, "logprob-nan", "NaN logprobs", checked_at=time.time(), requests=1
        )
    )
    m = Monitor(fleet, source=Script(world), report=lambda _k, line: said.append(line))
    task = asyncio.ensure_future(m.run(interval=0.25))
    try:
        # before the window: the seat pages, at the hook and through Alertmanager
        await until(lambda: of(hook_lines(log), "seat-check", "firing"), why="the seat page")
        await until(lambda: ("firing", "seat-check") in am_gx10(receiver), why="AM's seat page")

        window = sil.add_silence(
            host="gx10", duration=7200, comment="swap the seat", now=time.time() - 7200 + LEFT
        )

        def in_am() -> list[dict]:
            with urllib.request.urlopen(f"{am.url}/api/v2/silences", timeout=10) as r:
                return [
                    s
                    for s in json.loads(r.read())
                    if s["status"]["state"] == "active"
                    and f"fleetdeck silence {window.id}" in s["comment"]
                ]

        await until(in_am, why="the window in Alertmanager")

        # inside it: the run finishes, its notice fires and its hold ends
        world.run_state = "finished"
        await until(lambda: [x for x in said if "ALERT run-finished" in x], why="run-finished")
        await until(
            lambda: [x for x in said if "RESOLVED run-finished" in x], why="its hold ending"
        )
        # the swap: seat 28004's check fails too (inside the window), then both seats are
        # stopped: gone from the listing, their alerts resolve saying so
        record_check(
            SeatCheck(
                "gx10", 28004, False, "empty", "no tokens", checked_at=time.time(), requests=1
            )
        )
        await until(lambda: [x for x in said if "ALERT seat-check on gx10: port 28004" in x])
        world.seats = []
        await until(
            lambda: len([x for x in said if "RESOLVED seat-check" in x]) == 2, why="seats gone"
        )
        # gx10 is rebooted and does not come back within the window
        world.gx10_up = False
        await until(lambda: [x for x in said if "ALERT host-down on gx10" in x], why="host-down")
        assert time.time() < window.ends - 3, "the window ended before its day was done"
        await asyncio.sleep(2.0)  # what Alertmanager would say, it has said by now
        lines = hook_lines(log)
        assert [(x["state"], x["rule"]) for x in lines] == [("firing", "seat-check")], lines
        assert am_gx10(receiver) == [("firing", "seat-check")], receiver.posts
        # watch's own log says what the window holds
        (fin,) = [x for x in said if "ALERT run-finished" in x]
        assert f"(held by silence {window.id} until " in fin, fin

        # the window ends on its own
        await until(lambda: time.time() > window.ends, LEFT + 5, why="the window's end")
        await until(
            lambda: (
                of(hook_lines(log), "host-down", "firing")
                and len(of(hook_lines(log), "run-finished")) == 2
                and of(hook_lines(log), "seat-check", "resolved")
            ),
            why="what the window held",
        )
        await until(
            lambda: ("firing", "host-down") in am_gx10(receiver), why="host-down from Alertmanager"
        )
        await asyncio.sleep(3.0)  # anything doubled would have come by now
    finally:
        m.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        am.stop()
        receiver.close()

    lines = hook_lines(log)
    # exactly one run-finished, held then delivered, saying so; and its resolve once
    (ready,) = of(lines, "run-finished", "firing")
    assert "(held since " in ready["text"] and f"by silence {window.id})" in ready["text"]
    assert "final adapter is ready" in ready["text"]
    assert len(of(lines, "run-finished", "resolved")) == 1
    # no seat page: the one before the window, then its resolve, saying the seat is gone; of
    # 28004, which failed and went within the window, not a word
    assert [x["state"] for x in of(lines, "seat-check")] == ["firing", "resolved"]
    assert {x["subject"] for x in of(lines, "seat-check")} == {"port 28003"}
    assert "seat 28003 on gx10 is gone" in of(lines, "seat-check", "resolved")[0]["text"]
    # host-down, still true when the window ended, paged once, after it
    assert len(of(lines, "host-down")) == 1
    assert len(lines) == 5, lines  # nothing lost, nothing doubled
    assert not m.deliverer.pending and not [x for x in said if "warning" in x.lower()]
    # Alertmanager: the seat page before the window, nothing of gx10 while it lasted, host-down
    # after it, and never a seat page again
    got = am_gx10(receiver)
    assert got[0] == ("firing", "seat-check") and ("firing", "host-down") in got
    assert got.count(("firing", "seat-check")) == 1, got
    assert not receiver.alerts("firing", subject="port 28004"), receiver.posts
    assert ("firing", "run-finished") not in got  # it fired and resolved inside AM's silence too
