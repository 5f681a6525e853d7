"""`fleetdeck launch` end to end over loopback sshd hosts: detached runs and chains.

Prerequisite runs are real processes (`sleep`) behind a run.json, or real trainer runs; the
launched runs are real `fleetdeck train` processes on `random:tiny` (CPU, a few steps).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.launch.main import launch, preflight
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import procfs
from fleetdeck.cli.main import main

from support.launch import HOSTILE, base_values, manifest, wait_for, write_corpus, write_run_toml
from support.weights import safetensors

pytestmark = [pytest.mark.sshd, pytest.mark.train]
pytest.importorskip("torch")
pytest.importorskip("peft")


def ended(run: Path, states=("finished", "failed", "cancelled")):
    return lambda: manifest(run).get("state") in states and manifest(run)


class FakeRun:
    """A prerequisite run: a live process (sleep) and a run.json saying running."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)
        self.proc = subprocess.Popen(["sleep", "600"])
        self.write(
            state="running", pid=self.proc.pid, start_ticks=procfs.start_ticks(self.proc.pid)
        )

    def write(self, **m):
        tmp = self.path / ".run.json.tmp"
        tmp.write_text(json.dumps(m))
        os.replace(tmp, self.path / "run.json")

    def finish(self, adapter=True):
        if adapter:
            (self.path / "adapter").mkdir()
            (self.path / "adapter" / "adapter_model.safetensors").write_bytes(
                safetensors(b"\0" * 64)
            )
            (self.path / "adapter" / "adapter_config.json").write_text("{}")
        self.write(state="finished", pid=self.proc.pid)
        self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def h1(sshd_fleet, tmp_path):
    fleet = sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])
    host = load_fleet(str(fleet)).host("h1")
    return fleet, host, sshd_fleet.hosts["h1"].runs, write_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture
def cleanup():
    """Prerequisite processes and waiters this test started, stopped whatever happens."""
    fakes, pids = [], []
    yield fakes, pids
    for f in fakes:
        f.stop()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass


async def do_launch(host, values, after=None):
    link = HostLink(host)
    try:
        return await launch(
            link, values, after=None if after is None else str(after), poll_interval=0.1
        )
    finally:
        await link.close()


def poll_run(fleet: Path, run: Path) -> dict:
    """The run as `fleetdeck runs --json` shows it (call it in a thread from async tests)."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["--hosts", str(fleet), "runs", "--json"])
    runs = {r["path"]: r for r in json.loads(buf.getvalue())["runs"]}
    return runs.get(str(run), {})


def never_started(run: Path):
    m = manifest(run)
    assert m["state"] == "cancelled" and m["pid"] is None
    assert [s["state"] for s in m["states"]] == ["queued", "cancelled"]
    assert not (run / "progress.jsonl").exists() and not (run / "adapter").exists()
    lines = (run / "train.log").read_text().splitlines()
    assert lines and all(" fleetdeck launch: " in line for line in lines)  # the trainer never spoke
    assert not any("starting" in line for line in lines)
    return m


def test_launch_runs_detached_to_finished(h1, tmp_path, capsys):
    fleet, host, runs, corpus = h1
    out_dir = runs / f"{HOSTILE} e2e"
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, out_dir.name))
    rc = main(["--hosts", str(fleet), "launch", "h1", str(toml), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert (
        doc["state"] == "running"
        and doc["run_path"] == str(out_dir)
        and isinstance(doc["pid"], int)
    )
    assert all(c["ok"] for c in doc["preflight"])
    final = wait_for(ended(out_dir), "the launched run to end")
    assert final["state"] == "finished", (out_dir / "train.log").read_text()[-2000:]
    assert final["pid"] == doc["pid"]  # the pid launch returned is the trainer's
    assert (out_dir / "adapter" / "adapter_model.safetensors").is_file()
    seen = wait_for(lambda: poll_run(fleet, out_dir), "runs --json to list the run")
    assert seen["state"] == "finished" and seen["adapter"] == str(out_dir / "adapter")
    copy = (out_dir / "RUN.toml").read_text()
    assert json.dumps(str(corpus)) in copy and json.dumps(str(out_dir)) in copy
    log = (out_dir / "train.log").read_text()
    assert "fleetdeck launch: starting" in log and "finished: adapter in" in log
    assert not (tmp_path / "pwned").exists() and not (runs / "pwned").exists()
    rec = [r for r in read_audit() if r["action"] == "launch"][-1]
    assert (rec["result"], rec["run"], rec["pid"]) == ("started", str(out_dir), doc["pid"])

    # a chain after this finished run would start at once
    async def check_after():
        link = HostLink(host)
        try:
            return await preflight(link, base_values(runs, corpus, "after-e2e"), after=str(out_dir))
        finally:
            await link.close()

    pre = asyncio.run(check_after())
    after = next(c for c in pre.checks if c.name == "after")
    assert after.ok and after.message == (
        f"run {out_dir} finished with its final adapter ({out_dir / 'adapter'}); "
        "the new run starts now"
    )


async def test_chain_after_a_failure_is_cancelled(h1, cleanup):
    fleet, host, runs, corpus = h1
    fakes, pids = cleanup
    prev = FakeRun(runs / "prev-fails")
    fakes.append(prev)
    nxt = runs / "next-after-failure"
    res = await do_launch(host, base_values(runs, corpus, nxt.name), after=prev.path)
    pids.append(res.waiter_pid)
    assert res.state == "queued" and res.pid is None and res.after == str(prev.path)
    assert manifest(nxt)["state"] == "queued" and manifest(nxt)["waiter_pid"] == res.waiter_pid
    assert (await asyncio.to_thread(poll_run, fleet, nxt))["state"] == "queued"
    prev.write(state="failed", pid=prev.proc.pid, error="corpus line 7 is not JSON")
    m = wait_for(ended(nxt), "the chained run to be cancelled")
    never_started(nxt)
    assert f"run {prev.path} failed (corpus line 7 is not JSON)" in m["cancel_reason"]
    assert (await asyncio.to_thread(poll_run, fleet, nxt))["state"] == "cancelled"
    assert [r["result"] for r in read_audit() if r["action"] == "launch"] == ["queued"]


async def test_chain_after_a_dead_process_is_cancelled(h1, cleanup):
    _, host, runs, corpus = h1
    fakes, pids = cleanup
    prev = FakeRun(runs / "prev-dies")
    fakes.append(prev)
    nxt = runs / "next-after-death"
    res = await do_launch(host, base_values(runs, corpus, nxt.name), after=prev.path)
    pids.append(res.waiter_pid)
    assert res.state == "queued"
    prev.stop()  # killed: run.json still says running
    m = wait_for(ended(nxt), "the chained run to be cancelled")
    never_started(nxt)
    assert "died without finishing" in m["cancel_reason"]


async def test_chain_after_finish_without_adapter_is_cancelled(h1, cleanup):
    _, host, runs, corpus = h1
    fakes, pids = cleanup
    prev = FakeRun(runs / "prev-no-adapter")
    fakes.append(prev)
    nxt = runs / "next-no-adapter"
    res = await do_launch(host, base_values(runs, corpus, nxt.name), after=prev.path)
    pids.append(res.waiter_pid)
    prev.finish(adapter=False)
    m = wait_for(ended(nxt), "the chained run to be cancelled")
    never_started(nxt)
    assert "finished without a final adapter (no adapter/ folder" in m["cancel_reason"]


async def test_stopping_the_waiter_cancels_the_run(h1, cleanup):
    _, host, runs, corpus = h1
    fakes, pids = cleanup
    prev = FakeRun(runs / "prev-long")
    fakes.append(prev)
    nxt = runs / "next-stopped"
    res = await do_launch(host, base_values(runs, corpus, nxt.name), after=prev.path)
    pids.append(res.waiter_pid)
    os.kill(res.waiter_pid, signal.SIGTERM)
    m = wait_for(ended(nxt), "the stopped chain to be cancelled")
    never_started(nxt)
    assert "the waiter was stopped (signal 15)" in m["cancel_reason"]
    prev.finish()  # too late: nothing starts
    time.sleep(0.5)
    assert manifest(nxt)["state"] == "cancelled"


async def test_chain_fires_after_success_even_with_ssh_gone(spare_fleet, tmp_path, cleanup):
    fakes, pids = cleanup
    spare_fleet.add("launch-s1")
    fleet = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    host = load_fleet(str(fleet)).host("launch-s1")
    runs = spare_fleet.hosts["launch-s1"].runs
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    prev = FakeRun(runs / "prev ok")
    fakes.append(prev)
    nxt = runs / f"{HOSTILE} next"
    res = await do_launch(host, base_values(runs, corpus, nxt.name), after=prev.path)
    pids.append(res.waiter_pid)
    assert res.state == "queued"
    spare_fleet.kill(
        "launch-s1"
    )  # the host's sshd and every SSH session are gone; the waiter is not
    prev.finish()
    final = wait_for(ended(nxt), "the chained run to end")
    assert final["state"] == "finished", (nxt / "train.log").read_text()[-2000:]
    assert [s["state"] for s in final["states"]] == ["queued", "running", "finished"]
    assert final["after"] == str(prev.path)
    assert (nxt / "adapter" / "adapter_model.safetensors").is_file()


async def test_real_failure_cancels_the_rest_of_the_chain(h1, tmp_path, cleanup):
    fleet, host, runs, corpus = h1
    fakes, pids = cleanup
    gate = FakeRun(runs / "chain-gate")
    fakes.append(gate)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "fine too"}\nnot json at all\n')
    a, b = runs / "chain-a-bad-corpus", runs / "chain-b"
    ra = await do_launch(host, base_values(runs, bad, a.name), after=gate.path)
    rb = await do_launch(host, base_values(runs, corpus, b.name), after=a)
    pids += [ra.waiter_pid, rb.waiter_pid]
    assert (ra.state, rb.state) == ("queued", "queued")
    gate.finish()
    ma = wait_for(ended(a), "run A to end")
    assert ma["state"] == "failed" and "line 3" in ma["error"], ma
    mb = wait_for(ended(b), "run B to be cancelled")
    never_started(b)
    assert f"run {a} failed" in mb["cancel_reason"]
    assert (await asyncio.to_thread(poll_run, fleet, b))["state"] == "cancelled"
    assert (await asyncio.to_thread(poll_run, fleet, a))["state"] == "failed"


async def test_two_launches_into_one_folder_one_wins(h1, cleanup):
    _, host, runs, corpus = h1
    fakes, pids = cleanup
    prev = FakeRun(runs / "prev-race")
    fakes.append(prev)
    values = base_values(runs, corpus, "raced")
    results = await asyncio.gather(
        do_launch(host, values, after=prev.path),
        do_launch(host, dict(values, seq_len=48), after=prev.path),
    )
    pids += [r.waiter_pid for r in results]
    assert sorted(r.state for r in results) == ["queued", "refused"]
    winner = next(r for r in results if r.state == "queued")
    loser = next(r for r in results if r.state == "refused")
    assert loser.reason == "output"
    assert manifest(runs / "raced")["waiter_pid"] == winner.waiter_pid
    want = 48 if winner is results[1] else 32
    assert f"seq_len = {want}\n" in (runs / "raced" / "RUN.toml").read_text()  # the winner's copy
    os.kill(winner.waiter_pid, signal.SIGTERM)
    wait_for(ended(runs / "raced"), "the raced run to be cancelled")
