"""Grouping, as an operator meets it: the first look at a host with a crontab full of unacknowledged
lines is one `new-stray` naming how many (real crontab lines on a real sshd host, a real hook
process), `schedules ack --host H --all` baselines them, a line added later is news of its own;
transitions reaching one hook or webhook within `group_wait` go out as one delivery listing them,
and the outbox journal keeps each transition exactly once across a crash in the middle of one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Schedule
from fleetdeck.backend.monitor.rules.alerts import Alert, AlertEngine
from fleetdeck.backend.monitor.rules.strays import FIRST_LOOK

from support.crontab import install_crontab

T0 = 1_800_000_000.0
#: a hook that logs each transition a delivery carries, one line each (id, state, rule, subject),
#: and each delivery's own id and size on a line of its own
HOOK = (
    "import json, os, sys\ndoc = json.loads(sys.stdin.read())\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    f.write('delivery\\t%s\\t%s\\n' % (os.environ['FLEETDECK_ID'], os.environ.get('FLEETDECK_COUNT', '1')))\n"
    "    for a in doc.get('alerts') or [doc]:\n"
    "        f.write('\\t'.join(str(a[k]) for k in ('id', 'state', 'rule', 'subject')) + '\\n')\n"
)


def sched(i: int, *reasons: str, host: str = "h1") -> Schedule:
    return Schedule(
        id=f"c-{i:032x}",
        host=host,
        kind="crontab",
        user="op",
        spec="37 * * * *",
        command=f"/home/op/check-{i}.sh",
        source="crontab",
        stray=True,
        reasons=reasons or ("unacknowledged",),
    )


def snap(t: float, *scheds: Schedule) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=t, schedules=scheds),), time=t
    )


def hook_log(log: Path) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """(deliveries as (id, count), transitions as [id, state, rule, subject]) the hook logged."""
    lines = [x.split("\t") for x in log.read_text().splitlines()] if log.exists() else []
    return [(x[1], x[2]) for x in lines if x[0] == "delivery"], [
        x for x in lines if x[0] != "delivery"
    ]


# -- the first look -------------------------------------------------------------------------------
def test_the_first_look_is_one_alert_naming_how_many_and_later_strays_are_news_of_their_own():
    e = AlertEngine()
    first = [sched(i) for i in range(49)] + [sched(99, "dead-target", "unacknowledged")]
    out = e.evaluate(snap(T0, *first))
    assert [(a.rule, a.subject, a.severity) for a in out] == [("new-stray", FIRST_LOOK, "warning")]
    assert out[0].text.startswith(
        "h1 holds 50 stray schedules seen at the first look (50 unacknowledged, "
        "1 naming a missing path)"
    )
    assert "schedules ack --host h1 --all" in out[0].text and "/home/op/check-99.sh" in out[0].text
    # a schedule that turns up after the first look is news: its own alert
    out = e.evaluate(snap(T0 + 5, *first, sched(200)))
    assert [(a.rule, a.subject) for a in out] == [("new-stray", sched(200).id)]
    # acknowledging some lowers the count without a new transition; all of them resolves it
    assert e.evaluate(snap(T0 + 10, *first[:3], sched(200))) == []
    (one,) = [a for a in e.firing() if a.subject == FIRST_LOOK]
    assert one.text.startswith("h1 holds 3 stray schedules") and one.severity == "info"
    out = e.evaluate(snap(T0 + 15, sched(200)))
    assert [(a.subject, a.state) for a in out] == [(FIRST_LOOK, "resolved")]
    # the first look is saved with the state: a restarted engine does not look first again
    again = AlertEngine()
    assert again.load_state(json.loads(json.dumps(e.to_state()))) == []
    out = again.evaluate(snap(T0 + 20, sched(200), sched(201)))
    assert [(a.subject, a.state) for a in out] == [(sched(201).id, "firing")]


def test_a_state_saved_before_the_first_look_existed_keeps_its_alerts_as_they_were():
    """After an upgrade each host's next poll is its first look; a schedule already firing on
    its own stays on its own (neither resolved nor paged again), the others are folded."""
    old = AlertEngine()
    old.evaluate(snap(T0 - 5))
    old.evaluate(snap(T0, sched(1)))
    state = old.to_state()
    for k in ("looked", "first_look"):
        state.pop(k)
    e = AlertEngine()
    assert e.load_state(json.loads(json.dumps(state))) == []
    out = e.evaluate(snap(T0 + 5, sched(1), sched(2), sched(3)))
    assert [(a.subject, a.state) for a in out] == [(FIRST_LOOK, "firing")]
    assert "2 stray schedules" in out[0].text and sched(1).id in {a.subject for a in e.firing()}


@pytest.mark.sshd
@pytest.mark.root
@pytest.mark.skipif(shutil.which("crontab") is None, reason="cron's crontab is not installed")
def test_a_real_crontab_first_look_pages_once_and_ack_all_baselines_it(
    spare_fleet,
    root_crontab,  # noqa: F811
    tmp_path,
    capsys,
):
    from fleetdeck.cli.main import main

    lines = [f"{i} 4 * * * /usr/bin/true first-look-{i}" for i in range(12)]
    install_crontab("".join(x + "\n" for x in lines), tmp_path)
    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    argv = [sys.executable, str(tmp_path / "hook.py"), str(log)]
    fleet = tmp_path / "hosts.toml"
    # a host of its own: a run another test left on the shared fleet's h1 would page too
    spare_fleet.add("h1")
    fleet.write_text(
        spare_fleet.fleet_toml(["h1"]) + f"\n[alerts]\non_alert = {json.dumps(argv)}\n"
    )
    watch = [
        sys.executable,
        "-m",
        "fleetdeck.cli.main",
        "--hosts",
        str(fleet),
        "watch",
        "--count",
        "1",
    ]
    done = subprocess.run(watch, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _, got = hook_log(log)
    strays = [g for g in got if g[2] == "new-stray"]
    assert [(s[1], s[3]) for s in strays] == [("firing", FIRST_LOOK)], got  # one, not one per line
    assert main(["--hosts", str(fleet), "schedules", "--host", "h1", "--stray-only", "--json"]) == 0
    listed = [
        s
        for s in json.loads(capsys.readouterr().out)["schedules"]
        if "unacknowledged" in s["reasons"]
    ]
    assert len(listed) >= 12 and {x for x in lines} <= {s.get("raw") for s in listed}
    said = [x for x in done.stdout.splitlines() if f"new-stray on h1: {FIRST_LOOK}" in x]
    # (the count is what the host held then: other users' crontabs on this machine may change)
    assert (
        len(said) == 1 and int(re.search(r"h1 holds (\d+) stray schedules", said[0]).group(1)) >= 12
    ), said

    # a line added after the first look is news of its own
    install_crontab(
        "".join(x + "\n" for x in [*lines, "5 5 * * * /usr/bin/true added-later"]), tmp_path
    )
    log.unlink()
    done = subprocess.run(watch, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _, got = hook_log(log)
    assert [(g[1], g[2]) for g in got] == [("firing", "new-stray")] and got[0][3] != FIRST_LOOK, got

    # ack --all baselines every unacknowledged schedule of the host: the first look resolves
    assert main(["--hosts", str(fleet), "schedules", "ack", "--host", "h1", "--all"]) == 0
    # (other processes' loops and crontabs on this machine come and go meanwhile: at least our
    # twelve lines and the one added later)
    acked = int(re.search(r"h1: acknowledged (\d+) schedules", capsys.readouterr().out).group(1))
    assert acked >= len(lines) + 1
    log.unlink()
    done = subprocess.run(watch, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _, got = hook_log(log)
    assert sorted((g[1], g[2], g[3] == FIRST_LOOK) for g in got) == [
        ("resolved", "new-stray", False),
        ("resolved", "new-stray", True),
    ], got
    from fleetdeck.backend.actions import audit

    rec = [r for r in audit.read_audit() if r["action"] == "schedule-ack"][-1]
    assert rec["all"] is True and rec["result"] == "done" and len(rec["ids"]) == acked


def test_ack_all_needs_a_host_and_no_ids(tmp_path, capsys):
    from fleetdeck.cli.main import main

    fleet = tmp_path / "hosts.toml"
    fleet.write_text("[hosts.local]\nlocal = true\n")
    for argv in (["--all"], ["c-1", "--all", "--host", "local"], []):
        assert main(["--hosts", str(fleet), "schedules", "ack", *argv]) == 2
        assert "--host NAME --all" in capsys.readouterr().err


# -- one delivery for what comes together ------------------------------------------------------------
class Got(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Got.got.append((self.headers["Idempotency-Key"], body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a) -> None:
        pass


def failed(i: int) -> Alert:
    return Alert(
        "run-failed", f"h{i % 2}", f"/runs/run-{i}", "firing", T0 + i, f"run run-{i} failed: exit 1"
    )


async def test_transitions_within_group_wait_are_one_delivery_listing_them(tmp_path):
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    Got.got = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Got)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    journal = Journal(tmp_path / "outbox.jsonl")
    d = Deliverer(
        (sys.executable, str(tmp_path / "hook.py"), str(log)),
        f"http://127.0.0.1:{srv.server_address[1]}/",
        journal=journal,
        group_wait=0.6,
    )
    task = asyncio.ensure_future(d.run())
    try:
        d.enqueue([failed(0), failed(1)])
        await asyncio.sleep(0.2)
        d.enqueue([failed(2)])  # inside the window: it joins
        for _ in range(200):
            if not d.pending:
                break
            await asyncio.sleep(0.05)
        d.enqueue([failed(3)])  # after it: a delivery of its own
        for _ in range(200):
            if not d.pending:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        srv.shutdown()
        srv.server_close()
    deliveries, got = hook_log(log)
    assert [n for _, n in deliveries] == ["3", "1"]
    assert [g[3] for g in got] == [f"/runs/run-{i}" for i in range(4)]
    (key, body), (key1, body1) = Got.got
    assert body["group"] == 3 and key == body["id"] == deliveries[0][0] and len(body["alerts"]) == 3
    assert body["title"] == "ALERT 3 alerts on h0, h1: 3 firing" and body["severity"] == "critical"
    assert [a["id"] for a in body["alerts"]] == body["ids"] and "run run-2 failed" in body["text"]
    assert "group" not in body1 and body1["subject"] == "/runs/run-3" and key1 == body1["id"]
    # the journal: each transition added once and done once, at each sink
    recs = [json.loads(x) for x in (tmp_path / "outbox.jsonl").read_text().splitlines()]
    for op in ("add", "done"):
        per = sorted((r["id"], r["sink"]) for r in recs if r["op"] == op)
        assert len(per) == 8 and len(set(per)) == 8, (op, per)


def test_group_wait_is_an_alerts_key_bounded_like_the_others():
    from fleetdeck.backend.fleet.config import ConfigError
    from fleetdeck.backend.monitor.delivery.deliver import options

    host = '[hosts.a]\naddress = "x"\n'
    from fleetdeck.backend.monitor.rules.alerts import AlertConfig

    assert AlertConfig().group_wait == 10.0
    f = parse_fleet(host + "[alerts]\ngroup_wait = 0\n", "f.toml")
    assert f.alerts.group_wait == 0.0 and options(f.alerts)["group_wait"] == 0.0
    assert (
        options(parse_fleet(host + "[alerts]\ngroup_wait = 30\n", "f.toml").alerts)["group_wait"]
        == 30.0
    )
    with pytest.raises(
        ConfigError,
        match=r"group_wait = 601 is out of range: key 'group_wait' must be 0 \(off\) "
        "or between 1 and 600",
    ):
        parse_fleet(host + "[alerts]\ngroup_wait = 601\n", "f.toml")


def test_watch_takes_group_wait_from_the_fleet_file():
    from fleetdeck.backend.monitor.service import Monitor

    fleet = parse_fleet(
        '[hosts.a]\naddress = "x"\n[alerts]\non_alert = ["true"]\ngroup_wait = 30\n', "f.toml"
    )
    m = Monitor(fleet, role="deliver", source=object())
    assert m.deliverer is not None and m.deliverer.group_wait == 30.0


# -- a crash in the middle of a group ---------------------------------------------------------------
DELIVERER = """
import asyncio, sys
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.delivery.deliver import Deliverer
from fleetdeck.backend.monitor.delivery.outbox import Journal
journal, hook, log, first = sys.argv[1:5]
async def main():
    j = Journal(__import__("pathlib").Path(journal))
    d = Deliverer((sys.executable, hook, log), None, journal=j, group_wait=0.3)
    d.load_journal(None)
    if first == "1":
        d.enqueue([Alert("run-failed", "h1", f"/runs/run-{i}", "firing", 1.8e9 + i, "failed") for i in range(5)])
    print("ready", flush=True)
    task = asyncio.ensure_future(d.run())
    while d.pending:
        await asyncio.sleep(0.05)
    task.cancel()
    j.close()
asyncio.run(main())
"""
#: logs the delivery's members, then waits for `go` before it answers (the crash comes meanwhile)
SLOW_HOOK = HOOK + (
    "import os, time\nwhile not os.path.exists(sys.argv[1] + '.go'):\n    time.sleep(0.05)\n"
)


def test_a_crash_mid_group_loses_nothing_and_the_journal_keeps_each_transition_once(tmp_path):
    """The deliverer is killed (SIGKILL) while its hook holds a group of five: the next start
    sends the same five, same ids, as one delivery, and the journal then holds each of them
    added once and done once; a receiver dropping ids it has seen acts on each exactly once."""
    (tmp_path / "hook.py").write_text(SLOW_HOOK)
    log, journal = tmp_path / "hook.log", tmp_path / "outbox.jsonl"
    args = [sys.executable, "-c", DELIVERER, str(journal), str(tmp_path / "hook.py"), str(log)]
    first = subprocess.Popen(
        [*args, "1"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        for _ in range(600):
            if len(hook_log(log)[1]) == 5:
                break
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)  # the deliverer and the hook in flight, mid-group
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    before_deliveries, before = hook_log(log)
    assert [n for _, n in before_deliveries] == ["5"]
    (tmp_path / "hook.log.go").touch()
    again = subprocess.run([*args, "0"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    deliveries, got = hook_log(log)
    assert [n for _, n in deliveries] == ["5", "5"] and deliveries[0][0] == deliveries[1][
        0
    ]  # the same group
    ids = [g[0] for g in got]
    assert sorted(set(ids)) == sorted(g[0] for g in before) and len(set(ids)) == 5  # none lost
    recs = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    adds = [r["id"] for r in recs if r["op"] == "add"]
    dones = [r["id"] for r in recs if r["op"] == "done"]
    assert sorted(adds) == sorted(dones) == sorted(set(ids))  # each once, whatever compaction left
