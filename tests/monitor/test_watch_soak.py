"""The accelerated soak (`benchmarks/watch_soak.py --accelerated`): the monitor `watch` runs
(`backend/monitor/service.py`: history, alert rules, outbox journal, deliveries, the metrics
collector) driven for two simulated days on a clock the soak moves, against synthetic hosts that
flap, a hostile host answering through the channel's own checks, runs that overfit or go NaN,
stray cron lines, a webhook down an hour a day, and a restart half way.

What it holds: after the first simulated day (the retention here is one day) nothing grows
(RSS, Python's allocated blocks, open descriptors, alerts.json, the outbox journal, the history
database and its rows), the history's rows stay within what the retention allows, the
journal's records within what its compaction allows and the resolved alerts alerts.json keeps
within KEEP_RESOLVED, and every transition reaches each sink
exactly once, across the restart. The same run with deliberate leaks (no history retention,
no outbox compaction, every snapshot kept) must be called NOT FLAT, naming each: a verdict
that cannot say "grows" proves nothing.

Simulated time only: nothing here depends on how fast the machine is (the run takes tens of
seconds of real time on a busy two-core machine; pytest-timeout is the net).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOAK = ROOT / "benchmarks" / "watch_soak.py"
#: two simulated days at a poll every 2 simulated minutes, a day's retention: the second day is
#: the flat span
ARGS = ["--accelerated", "--days", "2", "--interval", "120", "--retention-days", "1"]


def soak(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "soak.json"
    r = subprocess.run(
        [sys.executable, str(SOAK), *ARGS, *extra, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
    )
    assert out.exists(), r.stdout[-2000:] + r.stderr[-4000:]
    return r, json.loads(out.read_text())


def test_two_simulated_days_stay_flat_and_deliver_each_transition_once(tmp_path: Path) -> None:
    r, fig = soak(tmp_path)
    v = fig["verdict"]
    said = r.stdout[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    not_flat = {k: f for k, f in v["figures"].items() if f["flat"] is not True}
    assert not not_flat, f"{not_flat}\n{said}"
    over = {k: b for k, b in v["bounds"].items() if not b["held"]}
    assert not over, f"{over}\n{said}"
    assert v["flat"] is True and r.returncode == 0, said
    # the history held rows at all, and folded them: a verdict over nothing would be no verdict
    assert v["figures"]["rows_samples"]["last"] > 1000, said
    # something happened to deliver: host-down, overfitting, loss-nonfinite, disk-full-eta,
    # idle-holder, new-stray and seat-restart transitions over two days
    assert fig["transitions_printed"] >= 100, said
    assert fig["restarted"] is True
    assert fig["transition_ids_queued"] == fig["transitions_printed"]
    assert fig["deliveries_per_transition_command"] == [1], said
    assert fig["deliveries_per_transition_webhook"] == [1], said
    assert fig["never_delivered_command"] == 0 and fig["never_delivered_webhook"] == 0, said
    # an id at one sink only is one whose other delivery is still queued at the end
    assert fig["ids_only_one_sink"] <= fig["pending_at_end"], said
    # the only warnings are the webhook's hour down a day (attempts retried), never a crash,
    # a state file quarantined or a history write that failed
    assert all("alert webhook" in w for w in fig["distinct_warnings"]), fig["distinct_warnings"]


def test_the_verdict_names_each_deliberate_leak(tmp_path: Path) -> None:
    r, fig = soak(tmp_path, "--leak", "history,outbox,memory")
    v = fig["verdict"]
    said = r.stdout[-3000:]
    assert r.returncode == 1 and v["flat"] is False, said
    grew = {k for k, f in v["figures"].items() if f["flat"] is False}
    assert {"rows_samples", "history_files", "py_blocks", "rss"} <= grew, said
    over = {k for k, b in v["bounds"].items() if not b["held"]}
    assert {"rows_samples", "outbox_records"} <= over, said
    assert "NOT FLAT" in r.stdout
