"""The whole chain on a real sshd host: `fleetdeck watch` as a process, a run whose eval loss
turns up, a tmpfs filling, a NaN seat caught by `seats check`; hooks (a real command, a real
webhook server) receive each transition exactly once; the Prometheus scrape parses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.sshd, pytest.mark.root]
SERVER = Path(__file__).parents[1] / "support" / "seat_server.py"
#: logs each transition a delivery carries (one, or the members of a group, listed on stdin):
#: state, rule, subject, text
HOOK = (
    "import json, sys\ndoc = json.loads(sys.stdin.read())\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    for a in doc.get('alerts') or [doc]:\n"
    "        f.write('\\t'.join(' '.join(str(a[k]).split()) for k in ('state', 'rule', 'subject', 'text'))"
    " + '\\n')\n"
)


class Received(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self) -> None:
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Received.got.extend(doc.get("alerts") or [doc])  # one transition, or a group's members
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a) -> None:
        pass


def wait_for(what, deadline_s: float = 180):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = what()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def eval_lines(evals: list[tuple[int, float]]) -> str:
    return "".join(
        json.dumps({"step": s, "max_steps": 200, "loss": 3.0, "eval_loss": v, "time": time.time()})
        + "\n"
        for s, v in evals
    )


def hook_lines(log: Path) -> list[tuple[str, ...]]:
    return [tuple(x.split("\t")) for x in log.read_text().splitlines()] if log.exists() else []


def eta_seconds(text: str) -> float:
    m = re.search(r"fills in about ([\d.]+) ?(s|min|h|days)\b", text)
    assert m, text
    return float(m.group(1)) * {"s": 1, "min": 60, "h": 3600, "days": 86400}[m.group(2)]


def test_watch_end_to_end(spare_fleet, tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.skip("needs root for a tmpfs")
    pytest.importorskip("transformers")
    from fleetdeck.cli.main import main

    h1 = spare_fleet.add("h1")
    tank = tmp_path / "tank"
    tank.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(tank)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    run = h1.runs / "run-1"
    run.mkdir()
    (run / "progress.jsonl").write_text(
        eval_lines([(25, 3.20), (50, 3.17), (75, 3.18), (100, 3.19)])
    )
    Received.got = []
    web = ThreadingHTTPServer(("127.0.0.1", 0), Received)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    log, hook = tmp_path / "hook.log", tmp_path / "hook.py"
    hook.write_text(HOOK)
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(
        spare_fleet.fleet_toml(per_host={"h1": {"purge_roots": [str(tank)]}})
        + "\n".join(
            [
                "[alerts]",
                "disk_rate_min_span = 1",
                "disk_rate_window = 600",
                "for = { disk-full-eta = 0 }",
                f"on_alert = {json.dumps([sys.executable, str(hook), str(log), '{state}', '{rule}', '{subject}', '{text}'])}",
                f'webhook = "http://127.0.0.1:{web.server_address[1]}/hook"',
                "",
            ]
        )
    )
    nan = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0", "--nan"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    watch = None
    try:
        port = int(nan.stdout.readline().split()[-1])
        # the NaN seat is caught by `seats check`, and its verdict is kept for the alert rules
        assert main(["--hosts", str(fleet), "seats", "check", "h1", str(port)]) == 1
        assert "logprob-unserialisable" in capsys.readouterr().err
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetdeck.cli.main",
                "--hosts",
                str(fleet),
                "watch",
                "--interval",
                "0.5",
                "--prometheus",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        metrics_url = wait_for(
            lambda: re.search(r"metrics on (\S+)", watch.stdout.readline() or "x"), 60
        ).group(1)
        # up to ~48 MB into a 64 MB tmpfs, a little at a time, until the hook has heard of it (the
        # hook's first delivery waits out group_wait, 10 s: the disk keeps filling meanwhile)
        for i in range(48):
            (tank / f"chunk-{i}").write_bytes(os.urandom(2**20))
            time.sleep(0.3)
            if ("firing", "disk-full-eta", str(tank)) in {x[:3] for x in hook_lines(log)}:
                break
        fired = wait_for(
            lambda: (
                {x[:3] for x in hook_lines(log)}
                >= {
                    ("firing", "overfitting", str(run)),
                    ("firing", "disk-full-eta", str(tank)),
                    ("firing", "seat-check", f"port {port}"),
                }
                and hook_lines(log)
            )
        )
        # (the runs root may fire too: this machine's disk is busy and the test's window is 1 s)
        disk = [x for x in fired if x[:3] == ("firing", "disk-full-eta", str(tank))][0]
        assert 0 < eta_seconds(disk[3]) < 3600  # tens of MB a second into 64 MB: seconds, not days
        over = [x for x in fired if x[:2] == ("firing", "overfitting")][0]
        assert "best so far is step 50" in over[3]
        # the scrape parses, and says what the poll saw
        text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert [s.value for s in fams["fleetdeck_host_up"].samples if s.labels["host"] == "h1"] == [
            1.0
        ]
        assert "fleetdeck_gpu_memory_used_bytes" in fams
        free = [
            s for s in fams["fleetdeck_disk_free_bytes"].samples if s.labels["path"] == str(tank)
        ]
        assert free and free[0].labels["host"] == "h1" and free[0].value < 64 * 2**20
        firing = {
            (s.labels["rule"], s.labels["subject"]) for s in fams["fleetdeck_alert_firing"].samples
        }
        assert {("overfitting", str(run)), ("disk-full-eta", str(tank))} <= firing
        ev = [s for s in fams["fleetdeck_run_eval_loss"].samples if s.labels["path"] == str(run)]
        assert ev and ev[0].value == pytest.approx(3.19)
        # the run turns down again and the disk is emptied: each resolves, once
        with (run / "progress.jsonl").open("a") as f:
            f.write(eval_lines([(125, 3.10)]))
        for c in tank.iterdir():
            c.unlink()
        wait_for(
            lambda: (
                {x[:3] for x in hook_lines(log)}
                >= {("resolved", "overfitting", str(run)), ("resolved", "disk-full-eta", str(tank))}
            )
        )
        time.sleep(2)  # a few more polls: nothing more may arrive
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(60) == 0
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        nan.kill()
        subprocess.run(["umount", "-l", str(tank)])
        web.shutdown()
    lines = hook_lines(log)
    counts = Counter((s, r, subj) for s, r, subj, *_ in lines)
    # what the test drove fired once and resolved once
    for subj, rule in ((str(run), "overfitting"), (str(tank), "disk-full-eta")):
        assert counts[("firing", rule, subj)] == counts[("resolved", rule, subj)] == 1, counts
    assert counts[("firing", "seat-check", f"port {port}")] == 1
    # and every alert (the busy runs disk may come and go with a 1 s window) alternates:
    # a transition is delivered once, never twice in a row
    seqs: dict = {}
    for s, r, subj, *_ in lines:
        seqs.setdefault((r, subj), []).append(s)
    for key, seq in seqs.items():
        assert seq == ["firing", "resolved"] * (len(seq) // 2) + ["firing"] * (len(seq) % 2), (
            key,
            seq,
        )
    # the webhook got the same transitions, except what SIGTERM left in the outbox for the next
    # start (the machine's own cron entries may turn stray while the test runs); deliveries run
    # side by side, so only each alert's own transitions keep their order
    from fleetdeck.backend.monitor.delivery.outbox import Journal

    folder = Path(os.environ["XDG_STATE_HOME"]) / "fleetdeck"
    state = json.loads((folder / "alerts.json").read_text())
    left, _, _ = Journal(folder / "outbox.jsonl").load(state["outbox_seq"], move=False)
    queued = {
        sink: Counter(
            (p.alert["state"], p.alert["rule"], p.alert["subject"]) for p in left if p.sink == sink
        )
        for sink in ("command", "webhook")
    }
    at_hook = Counter(x[:3] for x in lines)
    at_web = Counter((x["state"], x["rule"], x["subject"]) for x in Received.got)
    assert at_web - at_hook <= queued["command"] and at_hook - at_web <= queued["webhook"]
    hooked: dict = {}
    for s, r, subj in [(x["state"], x["rule"], x["subject"]) for x in Received.got]:
        hooked.setdefault((r, subj), []).append(s)
    driven = {(r, subj) for s, r, subj in at_hook if r != "new-stray"}
    assert {k: v for k, v in hooked.items() if k in driven} == {
        k: v for k, v in seqs.items() if k in driven
    }
    # `alerts` carries on from the watcher's state: the seat check still fires
    assert main(["--hosts", str(fleet), "alerts", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    states = {(a["rule"], a["state"]) for a in doc["alerts"]}
    assert ("seat-check", "firing") in states and ("overfitting", "resolved") in states


async def test_watch_checks_the_seats_it_finds(tmp_path):
    """A NaN seat that looks like `vllm serve` to /proc: the probe finds it, the watcher checks
    it at `seat_check_interval` and the seat-check alert fires, naming the signature."""
    import io

    pytest.importorskip("transformers")
    from fleetdeck.backend.fleet.config import parse_fleet
    from fleetdeck.cli.watch import Watcher

    wrapper = tmp_path / "vllm"
    wrapper.write_text(
        f"#!{sys.executable}\nimport runpy, sys\n"
        f"sys.argv = [{str(SERVER)!r}, '--port', sys.argv[sys.argv.index('--port') + 1], '--nan']\n"
        f"runpy.run_path({str(SERVER)!r}, run_name='__main__')\n"
    )
    wrapper.chmod(0o755)
    from support.sshfleet import free_port

    port = free_port()
    seat = subprocess.Popen(
        [
            str(wrapper),
            "serve",
            "random:tiny",
            "--port",
            str(port),
            "--gpu-memory-utilization",
            "0.38",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert seat.stdout.readline().startswith("listening on")
        fleet = parse_fleet(
            f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{tmp_path}"]\n'
            "[alerts]\nseat_check_interval = 1\n",
            "hosts.toml",
        )
        out = io.StringIO()
        w = Watcher(fleet, out=out)
        await w.run(count=1)
        fired = [
            a for a in w.engine.firing() if a.rule == "seat-check" and a.subject == f"port {port}"
        ]
        assert len(fired) == 1 and "logprob-unserialisable" in fired[0].text
        assert f"ALERT seat-check on local: port {port}" in out.getvalue()
        # this seat's events only: another process on the machine may serve a seat of its own
        mine = [e for e in w.history.events(kind="seat-check") if e["subject"] == f"port {port}"]
        assert [e["text"].split(":")[0] for e in mine] == ["logprob-unserialisable"]
    finally:
        seat.kill()
        seat.wait()
