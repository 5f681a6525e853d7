"""The host boundary: every channel from a host bounded, every item checked on its own, and one
silent host never holding back the others (real loopback sshd hosts throughout)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.channel import ANSWER_LIMIT
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.fleet.validate_fields import MAX_ITEMS

from support.sshfleet import _descendants

pytestmark = pytest.mark.sshd


def _rss_mib() -> float:
    """This process's resident set now (from /proc, not the peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _write_run(root: Path, name: str, lines: list[str], **files: str) -> Path:
    d = root / name
    (d / "checkpoints").mkdir(parents=True, exist_ok=True)
    (d / "progress.jsonl").write_text("".join(line + "\n" for line in lines))
    for fname, text in files.items():
        (d / fname).write_text(text)
    return d


# -- size ---------------------------------------------------------------------------------------
async def test_a_host_with_long_series_and_many_runs_stays_up_and_its_full_series_is_on_demand(
    spare_fleet, tmp_path
):
    """~3 MB of eval series in one run and 150 runs of 2,500 points: over asyncssh's 2 MiB window
    in one answer before (the host showed as DOWN, 'the login shell printed text')."""
    h = spare_fleet.add("big")
    long_run = _write_run(
        h.runs,
        "run-long",
        [
            json.dumps({"step": i, "eval_loss": 3.0 + 1 / (i + 1), "max_steps": 10**6})
            for i in range(120_000)
        ],
    )
    for k in range(150):
        _write_run(
            h.runs,
            f"run-{k:03d}",
            [
                json.dumps({"step": i, "loss": 2.5 - i * 1e-4, "max_steps": 2500})
                for i in range(2500)
            ],
        )
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    async with Poller(fleet) as poller:
        snap = (await poller.poll()).hosts[0]
        assert snap.reachable, (snap.error_code, snap.error)
        assert len(snap.runs) == 151
        long = next(r for r in snap.runs if r.name == "run-long")
        assert 0 < len(long.eval_losses) <= 256
        assert long.eval_losses[-1] == (119_999, pytest.approx(3.0 + 1 / 120_000))
        steps = [s for s, _ in long.eval_losses]
        assert steps == sorted(set(steps))  # thinned, in order, no repeats
        # the whole series, on demand, over the same resident probe
        probe = poller._probes["big"]
        await probe.send_json({"op": "series", "path": str(long_run)})
        full = await asyncio.wait_for(probe.recv_json(), 60)
        assert full["ok"] and len(full["eval_losses"]) == 100_000  # FULL_SERIES_POINTS
        assert full["eval_losses"][-1][0] == 119_999


async def test_a_resident_helper_that_prints_without_end_is_cut_off_with_its_reason(
    spare_fleet, tmp_path
):
    h = spare_fleet.add("drip")
    del h
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    endless = "import sys\nsys.stdin.buffer.readline()\nwhile True:\n    sys.stdout.buffer.write(b'x' * 65536)\n"
    before = _rss_mib()
    async with Poller(fleet, probe=endless) as poller:
        snap = (await poller.poll()).hosts[0]
    assert not snap.reachable and snap.error_code == "answer-too-large", (
        snap.error_code,
        snap.error,
    )
    assert "probe" in snap.error and f"{ANSWER_LIMIT >> 20} MiB" in snap.error
    assert _rss_mib() - before < 200, "the controller's memory grew with the endless answer"


async def test_a_one_shot_helper_that_prints_without_end_is_refused_and_memory_stays_bounded(
    spare_fleet, tmp_path
):
    spare_fleet.add("flood")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    endless = "import sys\nwhile True:\n    sys.stdout.buffer.write(b'y' * 65536)\n"
    before = _rss_mib()
    async with HostLink(fleet.host("flood")) as link:
        with pytest.raises(HostError) as e:
            await link.run_helper(endless, {}, timeout=60, what="flooder")
        assert e.value.code == "answer-too-large", e.value.message
        # the same link still works: the channel went, the connection stayed
        res = await link.run(["echo", "ok"], timeout=20)
        assert res.stdout == b"ok\n"
    assert _rss_mib() - before < 300
    # and nothing of the flooder is left on the host
    await asyncio.sleep(0.5)
    assert not [
        p
        for p in _descendants(spare_fleet.hosts["flood"].proc.pid)
        if b"fleetdeck-helper" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]


# -- values ---------------------------------------------------------------------------------------
async def test_non_finite_and_huge_numbers_in_one_run_cost_that_run_only(spare_fleet, tmp_path):
    """One user's progress.jsonl with NaN, 1e400, 10**400 and figures whose ETA overflows: before,
    the whole host's answer failed (GPUs, runs and schedules gone)."""
    h = spare_fleet.add("values")
    _write_run(h.runs, "run-ok", [json.dumps({"step": 10, "loss": 2.0, "max_steps": 100})])
    _write_run(
        h.runs,
        "run-bad",
        [
            '{"step": 1, "loss": NaN, "max_steps": 1e400}',
            '{"step": ' + str(10**400) + ', "loss": Infinity}',
            json.dumps(
                {
                    "step": 3,
                    "loss": 1e308,
                    "seconds_per_step": 1e308,
                    "max_steps": 10**17,
                    "time": 1e308,
                }
            ),
        ],
    )
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    async with Poller(fleet) as poller:
        snap = (await poller.poll()).hosts[0]
    assert snap.reachable, snap.error
    assert snap.memory_total_bytes > 0 and snap.disks
    names = {r.name: r for r in snap.runs}
    assert set(names) == {"run-ok", "run-bad"}
    assert names["run-ok"].loss == 2.0
    bad = names["run-bad"]
    for v in (bad.loss, bad.eta_seconds, bad.seconds_per_step):
        assert v is None or math.isfinite(v)
    assert bad.step is None or bad.step <= 10**18


def test_each_bad_item_is_quarantined_and_named_and_the_rest_of_the_host_stays():
    answer = {
        "memory": {"total_bytes": 2**40, "used_bytes": "lots"},
        "load1": float("nan"),
        "gpus": [
            {
                "index": 0,
                "name": "H200",
                "uuid": "GPU-0",
                "memory_total_mib": 141000.0,
                "memory_used_mib": 1000.0,
                "utilization_pct": 7.0,
                "processes": [
                    {"pid": 12, "user": "op", "used_mib": float("inf"), "command": "python"},
                    {"pid": "twelve", "user": "op", "used_mib": 1.0, "command": "x"},
                ],
            },
            {"index": 10**30, "name": "ghost"},
            "not a gpu",
        ],
        "disks": [
            {
                "path": "/data",
                "mount": "/",
                "fstype": "ext4",
                "total_bytes": 2**70,
                "used_bytes": 1,
                "free_bytes": 1,
            }
        ],
        "runs": [
            {
                "path": "/r/run-1",
                "name": "run-1",
                "state": "running",
                "step": 5,
                "loss": 2.5,
                "losses": [[1, 3.0], [2, float("nan")], ["x", 1.0], [4, 2.6]],
                "eta_seconds": float("inf"),
            },
            {"path": ["/r/run-2"], "name": "run-2", "state": "running"},
            {
                "path": "/r/run-3",
                "name": "run-3",
                "state": "exploded",
                "step": True,
                "max_steps": 2**80,
            },
        ],
        "schedules": [
            {
                "id": "c1234567890",
                "kind": "crontab",
                "user": "op",
                "spec": "* * * * *",
                "command": "true",
                "source": "crontab",
                "pid": -4,
            },
            {"id": "x", "kind": "rootkit", "command": "evil"},
            {"id": None, "kind": "at", "command": "x"},
        ],
        "warnings": ["probe said hi", 12],
        "seats": [{"port": "nope"}],
    }
    snap = host_from_probe("h", answer, 1.0, 100.0)
    assert snap.reachable
    w = "\n".join(snap.warnings)
    # the good ones stay
    assert [g.index for g in snap.gpus] == [0]
    assert [p.pid for p in snap.gpus[0].processes] == [12]
    assert snap.gpus[0].processes[0].used_mib == 0.0
    assert [r.name for r in snap.runs] == ["run-1", "run-3"]
    r1, r3 = snap.runs
    assert r1.losses == ((1, 3.0), (4, 2.6)) and r1.eta_seconds is None
    assert r3.state == "unknown" and r3.step is None and r3.max_steps is None
    assert [s.id for s in snap.schedules] == ["c1234567890"]
    assert snap.schedules[0].pid is None
    assert snap.disks[0].total_bytes == 0 and snap.disks[0].used_bytes == 1
    assert snap.load1 is None and snap.memory_used_bytes == 0
    # each bad one is named: item and field
    for text in (
        "gpu #1 ghost quarantined: index",
        "gpu #2 quarantined",
        "run #1 run-2 quarantined: path",
        "run #0 run-1: losses: 2 bad points dropped",
        "run #0 run-1: eta_seconds: not finite",
        "run #2 run-3: step: not a number",
        "run #2 run-3: max_steps: out of range",
        "schedule #1 x quarantined: kind",
        "schedule #2 quarantined: id",
        "schedule #0 c1234567890: pid: out of range",
        "disk #0 /data: total_bytes: out of range",
        "answer: load1: not finite",
        "memory: used_bytes: not a number",
        "process left out",
        "probe said hi",
    ):
        assert text in w, (text, w)


def test_item_counts_are_bounded():
    answer = {
        "runs": [
            {"path": f"/r/{i}", "name": str(i), "state": "finished"}
            for i in range(MAX_ITEMS["runs"] + 5)
        ],
        "warnings": ["w"] * 1000,
    }
    snap = host_from_probe("h", answer, None, 0.0)
    assert len(snap.runs) == MAX_ITEMS["runs"]
    assert any("5 past" in w for w in snap.warnings)
    assert len(snap.warnings) <= MAX_ITEMS["warnings"] + 2


# -- silence --------------------------------------------------------------------------------------
async def test_a_silent_host_never_holds_back_the_others(spare_fleet, tmp_path):
    """SIGSTOP one host's sshd and every session it forked: the others keep answering every
    poll while it is still being asked, and it becomes `timeout` on its own deadline."""
    for n in ("a", "b", "mute"):
        spare_fleet.add(n)
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"command_timeout": 6, "connect_timeout": 3}
    )
    fleet = load_fleet(str(path))
    poller = Poller(fleet, deadline=0.5)
    mute = spare_fleet.hosts["mute"]
    stopped: list[int] = []
    try:
        first = await poller.poll()
        assert all(h.reachable for h in first.hosts), [h.error for h in first.hosts]
        stopped = [mute.proc.pid, *_descendants(mute.proc.pid)]
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        seen: dict[str, list[float]] = {"a": [], "b": []}
        codes: list[str | None] = []
        for _ in range(60):
            snap = await poller.poll()
            by = {h.name: h for h in snap.hosts}
            for n in seen:
                assert by[n].reachable, by[n].error
                seen[n].append(by[n].time)
            codes.append(by["mute"].error_code)
            if by["mute"].error_code == "timeout":
                break
            await asyncio.sleep(0.2)
        assert codes[-1] == "timeout", codes
        # while the silent host was still being asked, each poll brought the others anew
        polls_while_asking = len(codes) - 1
        assert polls_while_asking >= 3
        for n, times in seen.items():
            assert len(set(times)) == len(times), (n, times)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        await poller.close()


def test_runs_series_prints_a_runs_whole_series_and_stops_quietly_when_the_reader_goes(
    spare_fleet, tmp_path
):
    import subprocess
    import sys

    h = spare_fleet.add("ser")
    run = _write_run(
        h.runs,
        "run-s",
        [
            json.dumps({"step": i, "loss": 2.0 + i, **({"eval_loss": 1.5} if i % 50 == 0 else {})})
            for i in range(3000)
        ],
    )
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    cli = [
        sys.executable,
        "-m",
        "fleetdeck.cli.main",
        "--hosts",
        str(path),
        "runs",
        "--series",
        f"ser:{run}",
    ]
    out = subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["losses"]) == 3000 and len(doc["eval_losses"]) == 60
    assert doc["losses"][-1] == [2999, 3001.0]
    # a reader that stops after one line: exit 141, no traceback
    p = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(120) == 141 and b"step" in first
    assert b"Traceback" not in err
    # a folder without a series: a sentence and exit 1
    (h.runs / "nope").mkdir()
    bad = subprocess.run(
        [*cli[:-1], f"ser:{h.runs}/nope"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 1 and "holds neither progress.jsonl" in bad.stderr
    # no such folder: a sentence naming it, exit 1
    gone = subprocess.run(
        [*cli[:-1], f"ser:{h.runs}/gone"], capture_output=True, text=True, timeout=120
    )
    assert gone.returncode == 1 and "is not a folder on this host (no-run)" in gone.stderr


def test_a_process_parent_pid_reaches_the_model_and_a_hostile_one_is_dropped():
    from fleetdeck.backend.fleet.validate import host_from_probe

    def proc(ppid):
        d = {
            "processes": [{"pid": 70, "start": 5, "user": "u", "command": "python x", "ppid": ppid}]
        }
        return host_from_probe("h", d, 1.0, 0.0).processes[0]

    assert proc(1).ppid == 1
    for bad in (-1, 2**40, "1; rm -rf /", 1.5, None, [1]):
        assert proc(bad).ppid is None and proc(bad).pid == 70


def test_a_runs_step_time_fields_reach_the_json_and_absurd_ones_are_dropped():
    from fleetdeck.backend.fleet.models import run_json
    from fleetdeck.backend.fleet.validate import host_from_probe

    def run(**kw):
        d = {
            "runs": [
                {"path": "/r/a", "name": "a", "state": "running", "seconds_per_step": 0.5, **kw}
            ]
        }
        return run_json(host_from_probe("h", d, 1.0, 0.0).runs[0])

    good = run(last_seconds_per_step=30.0, step_times=20)
    assert (good["seconds_per_step"], good["last_seconds_per_step"], good["step_times"]) == (
        0.5,
        30.0,
        20,
    )
    bad = run(last_seconds_per_step=-1, step_times="20; rm")
    assert (
        bad["last_seconds_per_step"] is None
        and bad["step_times"] is None
        and bad["seconds_per_step"] == 0.5
    )
