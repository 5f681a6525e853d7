"""Silences: `fleetdeck silence add / list / expire` (bounded, audited, persisted and read strictly),
and what they do to delivery with a real hook process: a silenced alert is held, not delivered;
a host-wide silence is a maintenance window; a silence that ends (on its own, or expired from
another process) lets what it held go out; a firing and its resolved inside one are never
delivered; and `fleetdeck alerts` still lists a silenced alert, marked with who and until when."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.monitor import silences as sil
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import SilenceRefused

from support.watch import local_fleet, rising_evals, state_dir

T0 = 1_800_000_000.0
CLI = [sys.executable, "-m", "fleetdeck.cli.main"]
HOOK = (
    "import json, sys\ndoc = json.loads(sys.stdin.read())\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    for a in doc.get('alerts') or [doc]:\n"
    "        f.write('\\t'.join(str(a[k]) for k in ('state', 'rule', 'host', 'subject')) + '\\n')\n"
)


def fleetdeck(fleet: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "300"}
    return subprocess.run(
        [*CLI, "--hosts", str(fleet), *argv], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def fleet(tmp_path) -> Path:
    f = tmp_path / "hosts.toml"
    f.write_text('[hosts.gx10]\naddress = "gx10"\n[hosts.ana]\naddress = "ana"\n')
    return f


# -- the command line ------------------------------------------------------------------------------
def test_add_list_expire_round_trip_audited_and_persisted(fleet):
    done = fleetdeck(
        fleet, "silence", "add", "--host", "gx10", "--for", "2h", "--comment", "disk swap", "--json"
    )
    assert done.returncode == 0, done.stderr
    s = json.loads(done.stdout)
    assert (
        s["host"] == "gx10"
        and s["rule"] is None
        and s["state"] == "active"
        and s["comment"] == "disk swap"
    )
    assert 7190 < s["ends"] - time.time() <= 7200 and s["by"]
    other = json.loads(
        fleetdeck(
            fleet,
            "silence",
            "add",
            "--rule",
            "run-stalled",
            "--subject",
            "/runs/run-7*",
            "--for",
            "30m",
            "--comment",
            "known slow eval",
            "--json",
        ).stdout
    )
    listed = fleetdeck(fleet, "silence", "list", "--json")
    assert listed.returncode == 0
    assert [x["id"] for x in json.loads(listed.stdout)["silences"]] == [
        other["id"],
        s["id"],
    ]  # ending soonest first
    table = fleetdeck(fleet, "silence", "list")
    assert (
        "host gx10 (maintenance)" in table.stdout
        and "run-stalled about /runs/run-7* on every" in table.stdout
    )
    gone = fleetdeck(fleet, "silence", "expire", s["id"])
    assert gone.returncode == 0 and f"expired {s['id']}: host gx10 (maintenance)" in gone.stdout
    states = {
        x["id"]: x["state"]
        for x in json.loads(fleetdeck(fleet, "silence", "list", "--json").stdout)["silences"]
    }
    assert states == {s["id"]: "expired", other["id"]: "active"}
    again = fleetdeck(fleet, "silence", "expire", s["id"])
    assert again.returncode == 1 and "already ended" in again.stderr
    missing = fleetdeck(fleet, "silence", "expire", "s-000000000000")
    assert missing.returncode == 1 and "no silence with id s-000000000000" in missing.stderr
    recs = [
        (r["action"], r["result"], r.get("id"))
        for r in audit.read_audit()
        if r["action"].startswith("silence")
    ]
    assert recs == [
        ("silence-add", "done", s["id"]),
        ("silence-add", "done", other["id"]),
        ("silence-expire", "done", s["id"]),
    ]


@pytest.mark.parametrize(
    "argv, rc, said",
    [
        (["--for", "2h", "--comment", "x"], 2, "name --host, --rule or --subject"),
        (["--host", "gx10", "--for", "31d", "--comment", "x"], 2, "from 1 minute to 30 days"),
        (["--host", "gx10", "--for", "30s", "--comment", "x"], 2, "from 1 minute to 30 days"),
        (
            ["--host", "gx10", "--for", "2 hours", "--comment", "x"],
            2,
            "is not a duration such as 90s",
        ),
        (["--host", "nope", "--for", "2h", "--comment", "x"], 2, "no host named 'nope'"),
        (["--rule", "stalled", "--for", "2h", "--comment", "x"], 2, "invalid choice: 'stalled'"),
        (["--host", "gx10", "--for", "2h", "--comment", "  "], 1, "needs a comment saying why"),
        (["--host", "gx10", "--for", "2h", "--comment", "x" * 501], 1, "at most 500"),
        # a silence of everything, however written: refused
        (["--subject", "*", "--for", "2h", "--comment", "x"], 1, "would hide every alert"),
        (["--subject", "**", "--for", "2h", "--comment", "x"], 1, "would hide every alert"),
        (["--subject", "?*", "--for", "2h", "--comment", "x"], 1, "would hide every alert"),
    ],
)
def test_what_a_silence_may_not_be_is_refused_and_nothing_is_saved(fleet, argv, rc, said):
    done = fleetdeck(fleet, "silence", "add", *argv)
    assert done.returncode == rc and said in done.stderr and "Traceback" not in done.stderr, (
        done.stderr
    )
    assert not sil.silences_path().exists()


def test_at_most_so_many_silences_are_in_force(monkeypatch):
    monkeypatch.setattr(sil, "ACTIVE_MAX", 3)
    for i in range(3):
        sil.add_silence(subject=f"s{i}", duration=3600, comment="x")
    with pytest.raises(SilenceRefused, match="3 silences are in force, the most there may be"):
        sil.add_silence(subject="s9", duration=3600, comment="x")


def test_a_silence_ends_on_its_own_and_ended_ones_are_pruned():
    s = sil.add_silence(host="gx10", duration=60, comment="short", now=time.time() - 61)
    store = sil.SilenceStore()
    store.refresh()
    assert store.active() == [] and store.silences[0].state(time.time()) == "ended"
    old = sil.add_silence(
        host="ana", duration=60, comment="long ago", now=time.time() - sil.KEEP_ENDED_S - 120
    )
    sil.add_silence(
        host="ana", duration=3600, comment="now"
    )  # a write prunes what ended a week ago
    ids = [x.id for x in sil.load_silences()[0]]
    assert s.id in ids and old.id not in ids


def test_a_bad_entry_is_quarantined_with_a_warning_and_the_rest_loads():
    good = sil.add_silence(host="gx10", duration=3600, comment="ok")
    doc = json.loads(sil.silences_path().read_text())
    doc["silences"] += [
        {"id": "s-bad", "host": "gx10", "starts": 1.0, "ends": float("nan"), "comment": "x"},
        {"id": "s-all", "starts": 1.0, "ends": 2.0, "comment": "matches everything"},
        7,
    ]
    sil.silences_path().write_text(json.dumps(doc))
    # a reader skips what is bad and says so
    said: list[str] = []
    store = sil.SilenceStore(warn=said.append)
    store.refresh()
    assert [s.id for s in store.silences] == [good.id]
    assert (
        len(said) == 1
        and "3 entries of silences.json did not load" in said[0]
        and "skipped" in said[0]
    )
    # a writer (or watch) quarantines it: the file no longer holds it, the quarantine folder does
    warned: list[str] = []
    sil.add_silence(host="ana", duration=3600, comment="next", warn=warned.append)
    assert len(warned) == 1 and "quarantined in" in warned[0]
    kept = json.loads(Path(warned[0].rsplit("quarantined in ", 1)[1]).read_text())
    assert [k["where"] for k in kept] == ["silences[1]", "silences[2]", "silences[3]"]
    assert (
        "ends is not a finite number" in kept[0]["why"]
        and "names no host, rule or subject" in kept[1]["why"]
    )
    assert len(sil.load_silences()[0]) == 2


def test_a_file_past_its_limit_is_moved_aside_unread(monkeypatch):
    monkeypatch.setattr(sil, "FILE_LIMIT", 1000)
    sil.silences_path().write_text(json.dumps({"silences": [], "pad": "x" * 2000}))
    warned: list[str] = []
    s = sil.add_silence(host="gx10", duration=3600, comment="after", warn=warned.append)
    assert "was quarantined" in warned[0] and "past the 1000-byte limit" in warned[0]
    assert [x.id for x in sil.load_silences()[0]] == [s.id]


# -- what it does to delivery ----------------------------------------------------------------------
def down(
    host: str,
    state: str = "firing",
    since: float = T0,
    rule: str = "host-down",
    subject: str | None = None,
):
    return Alert(rule, host, subject or host, state, since, f"{host} has not answered")


async def deliver_until(d, log: Path, n: int, seconds: float = 20.0) -> list[list[str]]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = [x.split("\t") for x in log.read_text().splitlines()] if log.exists() else []
        if len(got) >= n and (n < 3 or not d.pending):
            return got
        await asyncio.sleep(0.05)
    return [x.split("\t") for x in log.read_text().splitlines()] if log.exists() else []


async def test_a_silenced_alert_is_held_and_goes_out_when_its_silence_is_expired_from_another_process(
    tmp_path, fleet
):
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    maint = sil.add_silence(
        host="gx10", duration=7200, comment="maintenance"
    )  # a maintenance window
    journal = Journal(tmp_path / "outbox.jsonl")
    d = Deliverer(
        (sys.executable, str(tmp_path / "hook.py"), str(log)), None, journal=journal, group_wait=0
    )
    task = asyncio.ensure_future(d.run())
    try:
        d.enqueue([down("gx10"), down("gx10", rule="run-failed", subject="/runs/r1"), down("ana")])
        got = await deliver_until(d, log, 1)
        await asyncio.sleep(1.0)
        got = [x.split("\t") for x in log.read_text().splitlines()]
        assert got == [["firing", "host-down", "ana", "ana"]]  # gx10's are held, every rule of it
        assert len(d.pending) == 2
        # held in the journal until the silence ends (a restart keeps holding them)
        recs = [json.loads(x) for x in journal.path.read_text().splitlines()]
        assert {r["next_at"] for r in recs if r["op"] == "try"} == {maint.ends}
        done = fleetdeck(fleet, "silence", "expire", maint.id)
        assert done.returncode == 0, done.stderr
        got = await deliver_until(d, log, 3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sorted(tuple(x) for x in got[1:]) == [
        ("firing", "host-down", "gx10", "gx10"),
        ("firing", "run-failed", "gx10", "/runs/r1"),
    ]
    assert not d.pending


async def test_what_fired_and_resolved_within_a_silence_is_never_delivered_and_a_silence_ends_on_its_own(
    tmp_path,
):
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    sil.add_silence(rule="host-down", duration=3600, comment="network work")
    short = sil.add_silence(rule="run-stalled", duration=60, comment="eval", now=time.time() - 58.5)
    d = Deliverer(
        (sys.executable, str(tmp_path / "hook.py"), str(log)),
        None,
        journal=Journal(tmp_path / "outbox.jsonl"),
        group_wait=0,
    )
    task = asyncio.ensure_future(d.run())
    try:
        d.enqueue([down("gx10"), Alert("run-stalled", "ana", "/runs/r2", "firing", T0, "stalled")])
        await asyncio.sleep(0.5)
        d.enqueue([down("gx10", "resolved", T0 + 60)])  # back within the silence
        await asyncio.sleep(0.5)
        assert not log.exists() and d.silenced == 2
        got = await deliver_until(d, log, 1, seconds=10)  # run-stalled's silence runs out
        for _ in range(100):
            if not d.pending:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert got == [["firing", "run-stalled", "ana", "/runs/r2"]] and time.time() >= short.ends
    assert not d.pending


def test_fleetdeck_alerts_lists_a_silenced_alert_marked_with_who_and_until_when(
    tmp_path, capsys, monkeypatch
):
    from fleetdeck.cli.main import main

    runs = tmp_path / "runs"
    rising_evals(runs / "run-1")
    fleet = local_fleet(tmp_path, runs)
    state_dir().mkdir(parents=True, exist_ok=True)
    s = sil.add_silence(rule="overfitting", duration=3600, comment="expected: lr sweep")
    assert main(["--hosts", str(fleet), "alerts", "--json"]) == 0
    (a,) = [x for x in json.loads(capsys.readouterr().out)["alerts"] if x["rule"] == "overfitting"]
    assert a["state"] == "firing" and a["silenced"] == {
        "id": s.id,
        "by": s.by,
        "until": s.ends,
        "comment": "expected: lr sweep",
    }
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["--hosts", str(fleet), "alerts"]) == 0
    out = capsys.readouterr().out
    assert (
        "(1 silenced)" in out
        and f"silenced by {s.by} until" in out
        and "silenced" in out.split("overfitting")[0]
    )


async def test_a_notice_fired_and_resolved_within_a_silence_is_held_not_dropped(tmp_path, fleet):
    """The operator silenced a host for 2 h; its run finished inside the window and the notice's
    hold (15 min) ended inside it too. It is delivered when the window ends, saying it was held."""
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    (tmp_path / "hook.py").write_text(HOOK.replace("'subject')", "'subject', 'text')"))
    log = tmp_path / "hook.log"
    maint = sil.add_silence(host="gx10", duration=7200, comment="seat swap")
    d = Deliverer(
        (sys.executable, str(tmp_path / "hook.py"), str(log)),
        None,
        journal=Journal(tmp_path / "outbox.jsonl"),
        group_wait=0,
    )
    task = asyncio.ensure_future(d.run())
    try:
        ready = Alert("run-finished", "gx10", "/runs/r7", "firing", T0, "run r7 finished")
        d.enqueue([ready, down("gx10")])
        await asyncio.sleep(0.5)
        d.enqueue(
            [
                Alert("run-finished", "gx10", "/runs/r7", "resolved", T0 + 900, "run r7 finished"),
                down("gx10", "resolved", T0 + 60),
            ]
        )
        await asyncio.sleep(0.5)
        assert not log.exists() and d.silenced == 2  # host-down's pair only
        done = fleetdeck(fleet, "silence", "expire", maint.id)
        assert done.returncode == 0, done.stderr
        got = await deliver_until(d, log, 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [tuple(x[:4]) for x in got] == [
        ("firing", "run-finished", "gx10", "/runs/r7"),
        ("resolved", "run-finished", "gx10", "/runs/r7"),
    ]
    assert "(held since " in got[0][4] and f"by silence {maint.id})" in got[0][4], got


async def test_a_flapping_alert_held_behind_its_resolve_delivers_one_transition(tmp_path, fleet):
    """It fired before the window (delivered), then flapped 30 times inside it: what goes out when
    the window ends is its last word, not 61 stale transitions."""
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "hook.log"
    d = Deliverer(
        (sys.executable, str(tmp_path / "hook.py"), str(log)),
        None,
        journal=Journal(tmp_path / "outbox.jsonl"),
        group_wait=0,
    )
    task = asyncio.ensure_future(d.run())
    try:
        d.enqueue([down("gx10")])
        assert await deliver_until(d, log, 1)
        maint = sil.add_silence(host="gx10", duration=7200, comment="flapping link")
        t = T0 + 10
        for _ in range(30):
            d.enqueue([down("gx10", "resolved", t)])
            await asyncio.sleep(0.02)
            d.enqueue([down("gx10", "firing", t + 1)])
            await asyncio.sleep(0.02)
            t += 2
        d.enqueue([down("gx10", "resolved", t)])
        await asyncio.sleep(0.5)
        done = fleetdeck(fleet, "silence", "expire", maint.id)
        assert done.returncode == 0, done.stderr
        await deliver_until(d, log, 2)
        await asyncio.sleep(1.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    got = [x.split("\t")[0] for x in log.read_text().splitlines()]
    assert got == ["firing", "resolved"], got


def test_the_limit_holds_under_concurrent_adds(monkeypatch):
    """The clock and the count are read under the lock: adds that waited for it still see
    every silence added meanwhile."""
    import threading

    monkeypatch.setattr(sil, "ACTIVE_MAX", 10)
    out: list[str] = []

    def one(i: int) -> None:
        try:
            sil.add_silence(subject=f"run-{i}", duration=3600, comment="x")
            out.append("ok")
        except SilenceRefused:
            out.append("refused")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    now = time.time()
    assert out.count("ok") == 10 and out.count("refused") == 20
    assert len([x for x in sil.load_silences()[0] if x.active(now)]) == 10


def test_a_silence_past_its_bounds_or_of_everything_in_the_file_is_quarantined(fleet):
    good = sil.add_silence(host="gx10", duration=3600, comment="ok")
    doc = json.loads(sil.silences_path().read_text())
    now = time.time()
    doc["silences"] += [
        {"id": "s-forever", "host": "gx10", "starts": now, "ends": 1e300, "comment": "x"},
        {"id": "s-star", "subject": "*", "starts": now, "ends": now + 60, "comment": "x"},
    ]
    sil.silences_path().write_text(json.dumps(doc))
    assert [x.id for x in sil.load_silences()[0]] == [good.id]
    for argv in (["silence", "list"], ["alerts"]):
        done = fleetdeck(fleet, *argv)
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
        assert "OverflowError" not in done.stderr


def test_silences_in_force_are_on_metrics():
    from prometheus_client import CollectorRegistry, generate_latest

    from fleetdeck.backend.monitor.metrics.export import FleetCollector

    s = sil.add_silence(host="gx10", duration=3600, comment="disk swap")
    sil.add_silence(host="ana", duration=60, comment="over", now=time.time() - 120)
    reg = CollectorRegistry()
    reg.register(FleetCollector())
    text = generate_latest(reg).decode()
    lines = [x for x in text.splitlines() if x.startswith("fleetdeck_silence_active{")]
    assert len(lines) == 1 and f'id="{s.id}"' in lines[0] and 'host="gx10"' in lines[0], lines
