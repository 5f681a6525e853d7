"""The monitor's saved state, as `watch` meets it: an outbox whose every attempt costs the same
however full it is, and a damaged `alerts.json` or outbox journal that is quarantined entry by
entry (or whole, past its size limit) with a warning naming where it went, while `watch` starts
and delivers the rest. Real `watch` processes on a local fleet, real hook processes, a real
webhook server on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support.watch import WATCH, local_fleet, rising_evals, state_dir

#: a hook that logs each transition a delivery carries (one, or a group's members: stdin lists
#: them), one line each: id, state, rule, host, subject
LOGGER = (
    "import json, sys\ndoc = json.loads(sys.stdin.read())\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    for a in doc.get('alerts') or [doc]:\n"
    "        f.write('\\t'.join(str(a[k]) for k in ('id', 'state', 'rule', 'host', 'subject')) + '\\n')\n"
)
T0 = 1_800_000_000.0


def hook(tmp_path: Path) -> tuple[str, Path]:
    script, log = tmp_path / "hook.py", tmp_path / "hook.log"
    script.write_text(LOGGER)
    argv = [
        sys.executable,
        str(script),
        str(log),
        "{id}",
        "{state}",
        "{rule}",
        "{host}",
        "{subject}",
    ]
    return f"on_alert = {json.dumps(argv)}\n", log


def logged(log: Path) -> list[list[str]]:
    return [x.split("\t") for x in log.read_text().splitlines()] if log.exists() else []


def entry(i: int, **kw) -> dict:
    alert = {
        "rule": "host-down",
        "host": "ghost",
        "subject": f"ghost-{i}",
        "state": "firing",
        "since": T0 + i,
        "text": "ghost has not answered",
        "title": f"ALERT host-down on ghost: ghost-{i}",
    }
    alert.update(kw.pop("alert", {}))
    return {
        "id": f"{i:024x}",
        "sink": "command",
        "alert": alert,
        "created": T0,
        "attempts": 0,
        "next_at": 0.0,
        **kw,
    }


#: runs a command and says its peak memory (KiB) on the last line of stderr
PEAK = (
    "import resource, subprocess, sys\nr = subprocess.run(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\nsys.exit(r.returncode)\n"
)


def watch_once(fleet: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`watch --count 1` as a process: what it printed, and its peak memory (KiB)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK,
            *WATCH,
            "--hosts",
            str(fleet),
            "watch",
            "--count",
            "1",
            "--interval",
            "0.2",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    head, _, peak = done.stderr.rstrip("\n").rpartition("\n")
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, head), int(peak)


def warnings_of(done: subprocess.CompletedProcess) -> list[str]:
    return [x for x in done.stdout.splitlines() if x.startswith("warning: ")]


def quarantined() -> list[Path]:
    q = state_dir() / "quarantine"
    return sorted(q.iterdir()) if q.exists() else []


# -- constant work an attempt ------------------------------------------------------------------------
class Sink(BaseHTTPRequestHandler):
    got = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Sink.got += 1
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a) -> None:
        pass


def written() -> int:
    """What this process's write(2) calls have written so far (the webhook's requests go out by
    send(2), which this does not count)."""
    line = next(x for x in Path("/proc/self/io").read_text().splitlines() if x.startswith("wchar:"))
    return int(line.split()[1])


async def bytes_to_deliver(n: int, url: str) -> int:
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.backend.monitor.rules.alerts import Alert
    from fleetdeck.backend.monitor.service import Monitor

    fleet = parse_fleet(f'[hosts.h1]\naddress = "h1"\n[alerts]\nwebhook = "{url}"\n', "hosts.toml")
    m = Monitor(fleet, role="deliver", source=object(), group_max=1)  # one transition an attempt
    before = written()
    m.deliverer.enqueue(
        [Alert("run-failed", "h1", f"/runs/run-{i}", "firing", T0 + i, "failed") for i in range(n)]
    )
    m.save()
    task = asyncio.ensure_future(m.deliverer.run())
    for _ in range(6000):
        if not m.deliverer.pending:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    m.save()
    assert not m.deliverer.pending
    return written() - before


async def test_four_times_the_transitions_cost_four_times_the_bytes_not_sixteen(
    tmp_path, monkeypatch
):
    """Saving the whole outbox after every attempt wrote n**2 / 2 entries for n transitions; the
    journal writes a few records each."""
    Sink.got = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/hook"
    try:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "small"))
        small = await bytes_to_deliver(100, url)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "large"))
        large = await bytes_to_deliver(400, url)
    finally:
        srv.shutdown()
        srv.server_close()
    assert Sink.got == 500
    assert large / small < 8, (
        small,
        large,
    )  # constant work a transition: about x4 (quadratic: x16)
    assert large / 400 < 4096, large  # a few records, not the whole outbox, an attempt


# -- a damaged alerts.json -------------------------------------------------------------------------
def test_damaged_entries_are_quarantined_one_by_one_and_the_rest_is_delivered(tmp_path):
    """A legacy outbox holding an entry with `"attempts": Infinity` (a traceback at every start
    before), one with `"next_at": NaN` (that alert's later transitions blocked for ever, without
    a word) and one that is not an entry at all, beside good ones; a firing list with one bad
    alert beside a good one (the good one was forgotten with it, and fired again)."""
    runs = tmp_path / "runs"
    rising_evals(runs / "run-1")
    alerts, log = hook(tmp_path)
    fleet = local_fleet(tmp_path, runs, alerts)
    good = entry(1)
    blocked = entry(2, next_at=float("nan"))
    after_blocked = entry(3, alert={"subject": "ghost-2", "state": "resolved", "since": T0 + 50})
    infinite = entry(4, attempts=float("inf"))
    firing = {
        "rule": "overfitting",
        "host": "local",
        "subject": str(runs / "run-1"),
        "state": "firing",
        "since": T0,
        "text": "eval loss rose",
    }
    doc = {
        "firing": [firing, {"rule": 5, "host": "local"}],
        "outbox": [good, blocked, after_blocked, infinite, "x"],
    }
    state_dir().mkdir(parents=True, exist_ok=True)
    (state_dir() / "alerts.json").write_text(json.dumps(doc))
    done, _ = watch_once(fleet)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    # the good entries went out, the resolved behind the blocked firing included
    assert sorted(x[0] for x in logged(log)) == sorted([good["id"], after_blocked["id"]])
    # the good firing alert was carried over: it is not judged to start again
    assert "ALERT overfitting" not in done.stdout
    said = [w for w in warnings_of(done) if "did not load" in w]
    assert len(said) == 1 and "4 entries of alerts.json did not load" in said[0], warnings_of(done)
    (kept,) = quarantined()
    assert f"quarantined in {kept}" in said[0]
    where = {r["where"]: r["why"] for r in json.loads(kept.read_text())}
    assert set(where) == {"firing[1]", "outbox[1]", "outbox[3]", "outbox[4]"}
    assert (
        "next_at is not a finite number" in where["outbox[1]"] and "attempts" in where["outbox[3]"]
    )
    saved = json.loads((state_dir() / "alerts.json").read_text())  # rewritten without them
    assert [a["rule"] for a in saved["firing"]] == ["overfitting"] and "outbox" not in saved


@pytest.mark.parametrize(
    "doc",
    [
        '{"outbox": 5}',
        '{"firing": 5, "down_since": {"h": "NaN"}}',
        "[1, 2]",
        '{"firing": [',
        '{"pending": {"k": Infinity}}',
    ],
)
def test_a_state_of_the_wrong_shape_is_a_warning_and_watch_starts(tmp_path, doc):
    alerts, log = hook(tmp_path)
    fleet = local_fleet(tmp_path, tmp_path / "runs", alerts)
    state_dir().mkdir(parents=True, exist_ok=True)
    (state_dir() / "alerts.json").write_text(doc)
    done, _ = watch_once(fleet)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = [w for w in warnings_of(done) if "quarantine" in w]
    assert len(said) == 1, warnings_of(done)
    (kept,) = quarantined()
    assert str(kept) in said[0]
    assert doc in kept.read_text() or json.loads(kept.read_text())


def test_a_state_file_past_its_size_limit_is_moved_aside_unread(tmp_path):
    """300 MB was read whole (646 MiB of memory) before anything was judged."""
    alerts, _log = hook(tmp_path)
    fleet = local_fleet(tmp_path, tmp_path / "runs", alerts)
    state_dir().mkdir(parents=True, exist_ok=True)
    big = state_dir() / "alerts.json"
    with open(big, "wb") as f:
        f.write(b'{"firing": [')
        f.truncate(300 * 10**6)  # sparse: nothing is written but the head
    done, peak_kib = watch_once(fleet)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert peak_kib < 250 * 1024, peak_kib  # not read: far below the file's size
    (kept,) = quarantined()
    assert kept.stat().st_size == 300 * 10**6
    from fleetdeck.backend.monitor.alert_state import STATE_LIMIT

    said = [w for w in warnings_of(done) if "quarantined" in w]
    assert (
        len(said) == 1 and f"past the {STATE_LIMIT}-byte limit" in said[0] and str(kept) in said[0]
    )


# -- the journal -------------------------------------------------------------------------------------
def test_a_malformed_journal_line_is_quarantined_and_an_uncommitted_entry_dropped(tmp_path):
    """outbox.jsonl holds a torn line, a record with a NaN retry time, a good entry, and one
    queued by a cycle whose alert state was never saved (its seq past `outbox_seq`)."""
    alerts, log = hook(tmp_path)
    fleet = local_fleet(tmp_path, tmp_path / "runs", alerts)
    state_dir().mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"op": "add", "seq": 1, **entry(1)}),
        json.dumps({"op": "add", "seq": 2, **entry(2)}),
        json.dumps(
            {
                "op": "try",
                "id": entry(2)["id"],
                "sink": "command",
                "attempts": 1,
                "next_at": float("nan"),
            }
        ),
        '{"op": "add", "seq": 3, "id": "tor',
        json.dumps({"op": "add", "seq": 4, **entry(4)}),
    ]
    (state_dir() / "outbox.jsonl").write_text("\n".join(lines) + "\n")
    (state_dir() / "alerts.json").write_text(json.dumps({"outbox_seq": 3}))
    done, _ = watch_once(fleet)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert sorted(x[0] for x in logged(log)) == sorted([entry(1)["id"], entry(2)["id"]])
    said = [w for w in warnings_of(done) if "outbox.jsonl did not load" in w]
    assert len(said) == 1 and "2 entries" in said[0], warnings_of(done)
    (kept,) = quarantined()
    assert {r["where"] for r in json.loads(kept.read_text())} == {
        "outbox.jsonl line 3",
        "outbox.jsonl line 4",
    }
    # the journal was rewritten without them: the next start has nothing left to send
    again, _ = watch_once(fleet)
    assert again.returncode == 0 and len(logged(log)) == 2
    assert not [w for w in warnings_of(again) if "outbox" in w or "alerts.json" in w], warnings_of(
        again
    )


def test_the_journal_and_the_state_agree_after_a_save_that_failed(tmp_path):
    """A cycle's entries are journaled first and then the state names the last one: a state
    that could not be saved leaves its entries uncommitted, dropped by the next start together
    with the judgement that made them (judged and queued, or neither)."""
    from fleetdeck.backend.monitor.delivery.deliver import Deliverer
    from fleetdeck.backend.monitor.delivery.outbox import Journal
    from fleetdeck.backend.monitor.rules.alerts import Alert

    j = Journal(tmp_path / "outbox.jsonl")
    d = Deliverer(("true",), None, journal=j)
    d.enqueue([Alert("host-down", "h1", "h1", "firing", T0, "down")])
    committed = j.seq
    d.enqueue([Alert("host-down", "h2", "h2", "firing", T0, "down")])  # its state never saved
    j.close()
    again = Deliverer(("true",), None, journal=Journal(tmp_path / "outbox.jsonl"))
    rejects, warnings = again.load_journal(committed)
    assert (
        rejects == []
        and warnings == []
        and [p.alert.host for p in again.pending.values()] == ["h1"]
    )
    # and the one dropped is gone from the file, so a later, larger outbox_seq cannot revive it
    later = Deliverer(("true",), None, journal=Journal(tmp_path / "outbox.jsonl"))
    later.load_journal(committed + 10)
    assert [p.alert.host for p in later.pending.values()] == ["h1"]
