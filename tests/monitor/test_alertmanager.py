"""`[alerts] alertmanager`: `fleetdeck watch` hands its alerts to a real Alertmanager (Debian's
`prometheus-alertmanager`, on loopback with its own config and storage) whose webhook receiver
is the test's own: a firing alert reaches the receiver with its labels, a silence made through
Alertmanager's API holds it back, a resolve arrives as resolved, and an Alertmanager that is
down or cut off is one warning and a retry, with nothing lost (a resolve that could not be sent
is sent later, across a restart of watch too). Real `watch` processes on the local fleet."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.alert_rules import parse_alerts
from fleetdeck.backend.fleet.errors import ConfigError
from fleetdeck.backend.monitor.alertmanager.payload import am_alert
from fleetdeck.backend.monitor.alertmanager.sink import AlertmanagerSink
from fleetdeck.backend.monitor.metrics.values import LABEL_MAX
from fleetdeck.backend.monitor.rules.alerts import Alert

from support.promstack import Alertmanager, Forwarder, Receiver, free_port, wait_for

WATCH = [sys.executable, "-m", "fleetdeck.cli.main"]


def evals(run: Path, values: tuple[float, ...]) -> None:
    """A run whose eval losses are `values` at steps 25, 50, ... (rising ones: overfitting)."""
    run.mkdir(parents=True, exist_ok=True)
    rows = [
        {"step": 25 * (i + 1), "max_steps": 400, "loss": 3.0, "eval_loss": v, "time": time.time()}
        for i, v in enumerate(values)
    ]
    (run / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


RISING = (3.20, 3.17, 3.18, 3.19)


def falls(run: Path) -> None:
    """The next eval of a RISING run fell: its overfitting resolves (appended, as a trainer logs)."""
    with open(run / "progress.jsonl", "a") as f:
        f.write(
            json.dumps(
                {"step": 125, "max_steps": 400, "loss": 3.0, "eval_loss": 3.10, "time": time.time()}
            )
            + "\n"
        )


def fleet_file(tmp_path: Path, runs: Path, url: str) -> Path:
    f = tmp_path / "hosts.toml"
    f.write_text(
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{runs}"]\n'
        '[alerts]\ndisabled = ["new-stray", "disk-full-eta", "idle-holder", "gpu-headroom"]\n'
        f'alertmanager = ["{url}"]\n'
    )
    return f


class Watch:
    """A `fleetdeck watch` process and the lines it prints."""

    def __init__(self, fleet: Path) -> None:
        self.p = subprocess.Popen(
            [*WATCH, "--hosts", str(fleet), "watch", "--interval", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(
            target=lambda: self.lines.extend(iter(self.p.stdout.readline, "")), daemon=True
        ).start()

    def said(self, words: str) -> list[str]:
        assert self.p.poll() is None, f"watch ended ({self.p.returncode}): {self.lines[-20:]}"
        return [x for x in list(self.lines) if words in x]

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            return self.p.wait(60)
        return self.p.returncode


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def stack(tmp_path, receiver):
    """Things to stop at the end, in reverse."""
    things: list = []
    yield things
    for t in reversed(things):
        t.stop() if hasattr(t, "stop") else t.close()


def test_a_firing_alert_reaches_the_receiver_and_its_resolve_arrives_as_resolved(
    tmp_path, receiver, stack
):
    am = Alertmanager(tmp_path / "am", receiver.url)
    stack.append(am)
    run = tmp_path / "runs" / "run-1"
    evals(run, RISING)
    w = Watch(fleet_file(tmp_path, run.parent, am.url))
    stack.append(w)
    got = wait_for(
        lambda: receiver.alerts("firing", alertname="overfitting"), why="the firing alert"
    )[0]
    assert got["labels"]["host"] == "local"
    assert got["labels"]["severity"] == "warning"
    assert got["labels"]["subject"].endswith("run-1")
    assert "eval loss rose at two consecutive evals" in got["annotations"]["description"]
    assert got["annotations"]["summary"].startswith("ALERT overfitting on local")
    falls(run)
    done = wait_for(
        lambda: receiver.alerts("resolved", alertname="overfitting"), why="the resolve"
    )[0]
    assert done["labels"] == got["labels"]
    assert done["startsAt"][:19] == got["startsAt"][:19]  # the same alert, ended
    assert done["endsAt"] > done["startsAt"]
    assert not w.said("Alertmanager"), w.lines  # no warning on a healthy line


def test_a_silence_made_through_alertmanagers_api_stops_the_alert_it_matches(
    tmp_path, receiver, stack
):
    am = Alertmanager(tmp_path / "am", receiver.url)
    stack.append(am)
    held, other = tmp_path / "runs" / "run-held", tmp_path / "runs" / "run-other"
    evals(held, RISING)
    evals(other, RISING)
    fleet = fleet_file(tmp_path, held.parent, am.url)
    silence = am.silence("maintenance of run-held", alertname="overfitting", subject=str(held))
    w = Watch(fleet)
    stack.append(w)
    # the other run's alert, posted in the same request, reaches the receiver...
    wait_for(
        lambda: receiver.alerts("firing", alertname="overfitting", subject=str(other)),
        why="the other alert",
    )

    def held_there():
        return [a for a in am.alerts() if a["labels"].get("subject") == str(held)]

    mine = wait_for(held_there, why="the held alert in Alertmanager")[0]
    assert mine["status"]["state"] == "suppressed" and mine["status"]["silencedBy"] == [silence]
    time.sleep(3)  # three of its group intervals: the receiver would have had it by now
    assert not receiver.alerts(subject=str(held)), receiver.posts
    # ...and it was the silence alone that held this one: expired, it is delivered
    urllib.request.urlopen(
        urllib.request.Request(f"{am.url}/api/v2/silence/{silence}", method="DELETE"), timeout=10
    ).close()
    wait_for(
        lambda: receiver.alerts("firing", alertname="overfitting", subject=str(held)),
        why="the held alert",
    )


def test_alertmanager_down_is_one_warning_and_a_retry_and_the_alert_arrives_once_it_is_up(
    tmp_path, receiver, stack
):
    am_port = free_port()
    line = Forwarder(am_port)  # counts each attempt; nothing listens behind it yet
    stack.append(line)
    run = tmp_path / "runs" / "run-1"
    evals(run, RISING)
    w = Watch(fleet_file(tmp_path, run.parent, line.url))
    stack.append(w)
    wait_for(lambda: w.said("does not take alerts"), why="the warning")
    wait_for(lambda: line.refused >= 3, why="three attempts")
    assert len(w.said("does not take alerts")) == 1, w.lines
    am = Alertmanager(tmp_path / "am", receiver.url, port=am_port)
    stack.append(am)
    got = wait_for(
        lambda: receiver.alerts("firing", alertname="overfitting"), why="the alert, late"
    )[0]
    assert got["labels"]["subject"].endswith("run-1")
    wait_for(lambda: w.said("takes alerts again"), why="the all-clear")
    assert len(w.said("does not take alerts")) == 1, w.lines


def test_a_resolve_that_could_not_be_sent_is_sent_later_across_a_restart(tmp_path, receiver, stack):
    am = Alertmanager(tmp_path / "am", receiver.url)
    stack.append(am)
    line = Forwarder(am.port)
    stack.append(line)
    run = tmp_path / "runs" / "run-1"
    evals(run, RISING)
    fleet = fleet_file(tmp_path, run.parent, line.url)
    w = Watch(fleet)
    wait_for(lambda: receiver.alerts("firing", alertname="overfitting"), why="the firing alert")
    line.cut()
    falls(run)
    wait_for(lambda: w.said("RESOLVED overfitting"), why="watch seeing the resolve")
    wait_for(lambda: w.said("does not take alerts"), why="the warning")
    assert w.stop() == 0
    saved = json.loads(
        (Path(os.environ["XDG_STATE_HOME"]) / "fleetdeck" / "alertmanager.json").read_text()
    )
    assert [d["labels"]["alertname"] for d in saved["resolves"][line.url]] == ["overfitting"]
    assert [a["status"]["state"] for a in am.alerts()] == ["active"]  # it never heard
    assert not receiver.alerts("resolved")
    line.mend()
    w2 = Watch(fleet)
    stack.append(w2)
    done = wait_for(
        lambda: receiver.alerts("resolved", alertname="overfitting"), why="the late resolve"
    )[0]
    assert done["labels"]["subject"].endswith("run-1")
    wait_for(
        lambda: (
            json.loads(
                (Path(os.environ["XDG_STATE_HOME"]) / "fleetdeck" / "alertmanager.json").read_text()
            )["resolves"]
            == {}
        ),
        why="the saved resolve cleared",
    )


def test_hostile_text_is_labels_alertmanager_takes_and_sizes_are_capped(tmp_path, receiver, stack):
    am = Alertmanager(tmp_path / "am", receiver.url)
    stack.append(am)
    subject = "run-\x1b]52;c;cHduZWQ=\x07\udcff" + "x" * 5000
    a = Alert(
        "run-stalled",
        "local",
        subject,
        "firing",
        time.time() - 5,
        "stalled: \x1b[2J" + "y" * 100_000,
    )
    doc = am_alert(a, a.since, None, time.time())
    body = json.dumps([doc], ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )  # valid UTF-8, no surrogate
    assert len(doc["labels"]["subject"]) <= LABEL_MAX and doc["labels"]["subject"].isprintable()
    assert (
        len(doc["annotations"]["description"]) <= 2048
        and "\x1b" not in doc["annotations"]["description"]
    )
    assert len(body) < 16_000

    async def send() -> AlertmanagerSink:
        sink = AlertmanagerSink([am.url], path=tmp_path / "am.json")
        sink.update([a], [a])
        await sink.drain()
        return sink

    sink = asyncio.run(send())
    assert sink.posted == 1
    there = wait_for(
        lambda: [x for x in am.alerts() if x["labels"]["alertname"] == "run-stalled"], why="it"
    )[0]
    assert there["labels"]["subject"] == doc["labels"]["subject"]
    assert there["labels"]["subject"].startswith("run-\\x1b]52;c;cHduZWQ=\\x07\\xff")


def test_the_key_is_strict():
    assert parse_alerts({"alertmanager": ["http://127.0.0.1:9093/"]}, "f").alertmanager == (
        "http://127.0.0.1:9093",
    )
    for bad in (
        "http://a",
        [],
        ["ftp://a"],
        ["http://a?x=1"],
        ["http://a", "http://a/"],
        ["http://a\x1b"],
        [1],
        ["http://a"] * 9,
    ):
        with pytest.raises(ConfigError, match="alertmanager"):
            parse_alerts({"alertmanager": bad}, "f")


def test_saved_resolves_are_read_strictly(tmp_path):
    said: list[str] = []
    path = tmp_path / "alertmanager.json"
    path.write_text('{"resolves": ' * 100_000)  # nested past any parser's patience
    AlertmanagerSink(["http://127.0.0.1:9"], warn=said.append, path=path)
    assert len(said) == 1 and "could not be read" in said[0] and "set aside" in said[0]
    assert not path.exists() and (tmp_path / "alertmanager.json.bad").exists()
    good = am_alert(
        Alert("overfitting", "h", "/r/run-1", "resolved", time.time(), "ok"),
        time.time() - 60,
        time.time(),
        time.time(),
    )
    path.write_text(
        json.dumps(
            {"resolves": {"http://127.0.0.1:9": [good, {"labels": 5}, "x", {**good, "more": 1}]}}
        )
    )
    said.clear()
    sink = AlertmanagerSink(["http://127.0.0.1:9"], warn=said.append, path=path)
    assert list(sink.targets[0].resolves) == ["overfitting|h|/r/run-1"]
    assert said == [f"{path}: 3 saved resolve(s) were not alerts and were left out"]


def test_watch_count_posts_what_it_judged_before_it_ends(tmp_path, receiver, stack):
    am = Alertmanager(tmp_path / "am", receiver.url)
    stack.append(am)
    run = tmp_path / "runs" / "run-1"
    evals(run, RISING)
    done = subprocess.run(
        [*WATCH, "--hosts", str(fleet_file(tmp_path, run.parent, am.url)), "watch", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout, done.stdout
    # the process has ended: what Alertmanager holds, it was given before the end
    assert [a["labels"]["alertname"] for a in am.alerts()] == ["overfitting"]
    wait_for(lambda: receiver.alerts("firing", alertname="overfitting"), why="the notification")


def test_a_fleetdeck_silence_is_made_in_alertmanager_and_expired_there_with_it(
    tmp_path, receiver, stack
):
    """One maintenance window everywhere: `fleetdeck silence add` while watch runs makes the same
    silence in the real Alertmanager, whose receiver then never hears of the silenced alert;
    `silence expire` expires it there, and the alert reaches the receiver."""
    am = Alertmanager(tmp_path / "am", receiver.url)
    stack.append(am)
    held, other = tmp_path / "runs" / "run-held", tmp_path / "runs" / "run-other"
    fleet = fleet_file(tmp_path, held.parent, am.url)
    add = subprocess.run(
        [
            *WATCH,
            "--hosts",
            str(fleet),
            "silence",
            "add",
            "--subject",
            str(held)[:-2] + "*",
            "--rule",
            "overfitting",
            "--for",
            "2h",
            "--comment",
            "swap the seat",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert add.returncode == 0, add.stderr
    mine = json.loads(add.stdout)["id"]
    evals(held, RISING)
    evals(other, RISING)
    w = Watch(fleet)
    stack.append(w)

    def made():
        return [
            s
            for s in am_silences(am)
            if s["status"]["state"] == "active" and f"fleetdeck silence {mine}" in s["comment"]
        ]

    got = wait_for(made, why="the silence in Alertmanager")[0]
    assert {m["name"] for m in got["matchers"]} == {"alertname", "subject"}
    wait_for(
        lambda: receiver.alerts("firing", alertname="overfitting", subject=str(other)),
        why="the other alert",
    )
    time.sleep(3)
    assert not receiver.alerts(subject=str(held)), receiver.posts
    gone = subprocess.run(
        [*WATCH, "--hosts", str(fleet), "silence", "expire", mine],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gone.returncode == 0, gone.stderr
    wait_for(lambda: not made(), why="the silence expired in Alertmanager")
    wait_for(
        lambda: receiver.alerts("firing", alertname="overfitting", subject=str(held)),
        why="the held alert, once the window ended",
    )
    assert not w.said("do not follow"), w.lines


def am_silences(am) -> list[dict]:
    with urllib.request.urlopen(f"{am.url}/api/v2/silences", timeout=10) as r:
        return json.loads(r.read())


def test_a_subject_pattern_means_in_alertmanager_what_it_means_here():
    import fnmatch
    import re

    from fleetdeck.backend.monitor.alertmanager.silences import glob_regex

    patterns = ["/runs/run-*", "GPU?", "run-[0-9]", "run-[!0-9]*", "a.b*", "x[", "(a)+|b", "[]]x"]
    subjects = ["/runs/run-7", "/runs/run-", "GPU0", "GPU10", "run-5", "run-x", "a.bc", "axbc"]
    subjects += ["x[", "(a)+|b", "]x", "(a)+|bb"]
    for p in patterns:
        for s in subjects:
            assert bool(re.fullmatch(glob_regex(p), s)) == fnmatch.fnmatchcase(s, p), (p, s)
