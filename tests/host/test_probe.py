"""The host probe against real run folders, real processes and real files, run as a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import procfs

from support.probe import PROBE, checkpoint, probe, run_of, sleeper, write_progress
from support.weights import safetensors

HOSTILE = "-run 'q\"$(touch x) \nb"  # leading dash, quotes, $(..), a newline


def same_ids(a: dict, b: dict) -> None:
    """Every schedule seen in both replies (same entry: source, line, pid...) kept its id."""

    def ident(s):
        return (
            s["kind"],
            s["source"],
            s["line"],
            s["pid"],
            s["start_time"],
            s.get("unit"),
            s.get("job"),
            s["command"],
        )

    ids_a, ids_b = ({ident(s): s["id"] for s in r["schedules"]} for r in (a, b))
    common = set(ids_a) & set(ids_b)
    assert common and all(ids_a[k] == ids_b[k] for k in common)


# -- state from processes -----------------------------------------------------------------------
def test_a_process_working_in_a_run_makes_it_running_by_cwd_argv_or_open_file(tmp_path, children):
    root = tmp_path / "runs root"
    runs = {k: root / f"{HOSTILE}-{k}" for k in ("cwd", "argv", "fd", "idle")}
    for r in runs.values():
        (r / "checkpoints").mkdir(parents=True)
        write_progress(r, range(1, 11))
    by_cwd = sleeper(children, cwd=runs["cwd"])
    by_argv = sleeper(children, args=[str(runs["argv"] / "train.log")])
    log = runs["fd"] / "train.log"
    # the path travels in the environment, so only the open file can tell
    by_fd = sleeper(
        children,
        env=dict(os.environ, LOG=str(log)),
        code="import os,time; f=open(os.environ['LOG'],'a'); f.write('x'); f.flush(); "
        "open(os.environ['LOG'] + '.ready','w').close(); time.sleep(120)",
    )
    while not Path(str(log) + ".ready").exists():
        time.sleep(0.02)
    bystander = subprocess.Popen(["bash", "-c", "read x"], cwd=runs["idle"], stdin=subprocess.PIPE)
    children.append(bystander)
    rep = probe({"runs": [str(root)], "disk_paths": [str(root)]})
    got = {k: run_of(rep, r) for k, r in runs.items()}
    assert (got["cwd"]["state"], got["cwd"]["pid"]) == ("running", by_cwd.pid)
    assert (got["argv"]["state"], got["argv"]["pid"]) == ("running", by_argv.pid)
    assert (got["fd"]["state"], got["fd"]["pid"]) == ("running", by_fd.pid)
    assert got["idle"]["state"] == "unknown", "a shell sitting in a run folder is not training"
    assert got["cwd"]["name"] == runs["cwd"].name and got["cwd"]["step"] == 10
    assert got["cwd"]["eta_seconds"] == pytest.approx((159 - 10) * 2.0)
    for p in (by_cwd, by_argv, by_fd):
        p.kill()
        p.wait()
    rep = probe({"runs": [str(root)]})
    assert {r["state"] for r in rep["runs"]} == {"unknown"}
    assert all(r["reason"] for r in rep["runs"])


def test_the_probe_itself_in_a_run_folder_does_not_make_it_running(tmp_path):
    run = tmp_path / "runs" / "run-1"
    (run / "checkpoints").mkdir(parents=True)
    rep = probe({"runs": [str(tmp_path / "runs")]}, cwd=run)
    assert run_of(rep, run)["state"] == "unknown"
    assert run_of(rep, run)["pid"] is None


def test_run_json_pid_decides_running_failed_queued_cancelled(tmp_path, children):
    root = tmp_path / "runs"
    live = sleeper(children)
    ticks = int(Path(f"/proc/{live.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    dead = subprocess.Popen(["true"])
    dead.wait()
    cases = {
        "alive": {"state": "running", "pid": live.pid, "start_ticks": ticks},
        "reused": {"state": "running", "pid": live.pid, "start_ticks": ticks + 12345},
        "dead": {"state": "running", "pid": dead.pid, "start_ticks": 1},
        "said-failed": {"state": "failed", "pid": dead.pid},
        "queued": {"state": "queued", "pid": live.pid, "start_ticks": ticks},
        "no-start": {"state": "running", "pid": live.pid},
        "waiting": {
            "state": "queued",
            "pid": None,
            "waiter_pid": live.pid,
            "waiter_start_ticks": ticks,
        },
        "orphaned": {
            "state": "queued",
            "pid": None,
            "waiter_pid": dead.pid,
            "waiter_start_ticks": 1,
        },
        "cancelled": {"state": "cancelled"},
        "finished": {"state": "finished"},
    }
    for name, rj in cases.items():
        (root / name).mkdir(parents=True)
        (root / name / "run.json").write_text(json.dumps(rj))
    (root / "broken").mkdir()
    (root / "broken" / "run.json").write_text('{"state": "runn')
    rep = probe({"runs": [str(root)]})
    got = {r["name"]: r for r in rep["runs"]}
    assert (got["alive"]["state"], got["alive"]["pid"]) == ("running", live.pid)
    assert got["reused"]["state"] == "failed" and str(live.pid) in got["reused"]["reason"]
    assert got["dead"]["state"] == "failed" and "gone" in got["dead"]["reason"]
    assert got["said-failed"]["state"] == "failed"
    assert (got["queued"]["state"], got["queued"]["pid"]) == ("queued", live.pid)
    # a pid without its start time is not an identity: never "running" on the number alone
    assert got["no-start"]["state"] != "running" and got["no-start"]["pid"] is None
    assert "start time" in got["no-start"]["reason"]
    assert got["cancelled"]["state"] == "cancelled" and got["finished"]["state"] == "finished"
    assert got["waiting"]["state"] == "queued"
    assert got["orphaned"]["state"] == "cancelled" and "waiter" in got["orphaned"]["reason"]
    assert got["broken"]["state"] == "unknown" and "run.json" in got["broken"]["reason"]


def test_stalled_when_running_but_silent_far_longer_than_its_step_time(tmp_path, children):
    run = tmp_path / "runs" / "run-1"
    run.mkdir(parents=True)
    write_progress(run, range(1, 21), sps=1.5)
    sleeper(children, cwd=run)
    rep = probe({"runs": [str(tmp_path / "runs")], "stall_factor": 10})
    assert run_of(rep, run)["state"] == "running"
    old = time.time() - 3600
    os.utime(run / "progress.jsonl", (old, old))
    r = run_of(probe({"runs": [str(tmp_path / "runs")], "stall_factor": 10}), run)
    assert r["state"] == "stalled" and "no progress" in r["reason"]
    assert r["last_update"] == pytest.approx(old)


# -- progress from files --------------------------------------------------------------------------
def test_hugging_face_checkpoints_give_the_loss_and_eval_series(tmp_path):
    run = tmp_path / "runs" / "run-7"
    for s in (25, 50):
        checkpoint(run, s)
    newest = checkpoint(run, 100, nested=False)  # HF's own layout: checkpoint-N beside the run
    (newest / "big-link").symlink_to("/usr/bin/python3")  # counted as a link, not followed
    (newest / "sub").mkdir()
    (newest / "sub" / "optimizer.pt").write_bytes(b"1" * 4096)
    r = run_of(probe({"runs": [str(tmp_path / "runs")]}), run)
    assert (r["step"], r["max_steps"]) == (100, 159)
    assert r["eval_losses"] == [[25, 3.176], [50, 3.173], [75, 3.172], [100, 3.172]]
    assert r["losses"][0] == [5, 3.575] and r["losses"][-1] == [100, 3.1] and len(r["losses"]) == 20
    assert (r["loss"], r["eval_loss"]) == (3.1, 3.172)
    assert [(c["step"], c["path"]) for c in r["checkpoints"]] == [
        (25, str(run / "checkpoints" / "checkpoint-25")),
        (50, str(run / "checkpoints" / "checkpoint-50")),
        (100, str(newest)),
    ]
    files = [
        newest / "adapter_model.safetensors",
        newest / "trainer_state.json",
        newest / "sub" / "optimizer.pt",
    ]
    assert (
        r["checkpoints"][-1]["bytes"]
        == sum(f.stat().st_size for f in files) + os.lstat(newest / "big-link").st_size
    )
    assert r["state"] == "unknown" and r["adapter"] is None and r["reason"]


def test_a_truncated_trainer_state_is_unknown_with_a_reason_and_spares_the_others(tmp_path):
    root = tmp_path / "runs"
    bad = root / "run-bad"
    checkpoint(bad, 25)
    ck = checkpoint(bad, 50)
    text = (ck / "trainer_state.json").read_text()
    (ck / "trainer_state.json").write_text(text[: len(text) // 2])
    good = root / "run-good"
    checkpoint(good, 25)
    rep = probe({"runs": [str(root)]})
    b = run_of(rep, bad)
    assert (
        b["state"] == "unknown"
        and "trainer_state.json" in b["reason"]
        and "truncated" in b["reason"]
    )
    assert b["step"] is None and len(b["checkpoints"]) == 2
    assert run_of(rep, good)["step"] == 25 and run_of(rep, good)["eval_losses"] == [[25, 3.176]]


def test_progress_jsonl_with_a_torn_last_line_and_with_a_bad_line(tmp_path):
    root = tmp_path / "runs"
    torn, bad = root / "torn", root / "bad"
    torn.mkdir(parents=True)
    bad.mkdir()
    write_progress(torn, range(1, 11))
    with (torn / "progress.jsonl").open("a") as f:  # an eval line carries only eval_loss
        f.write(
            json.dumps({"step": 5, "eval_loss": 3.2}) + "\n" + '{"step": 11, "max_steps": 159, "lo'
        )
    write_progress(bad, range(1, 6))
    with (bad / "progress.jsonl").open("a") as f:
        f.write("not json at all\n" + json.dumps({"step": 6, "loss": 3.0}) + "\n")
    rep = probe({"runs": [str(root)]})
    t = run_of(rep, torn)
    assert (t["step"], t["state"], t["reason"]) == (
        10,
        "unknown",
        "no live process, no final adapter",
    )
    assert (
        len(t["losses"]) == 10 and t["eval_losses"] == [[5, 3.2]] and t["seconds_per_step"] == 2.0
    )
    b = run_of(rep, bad)
    assert b["state"] == "unknown" and "line 6" in b["reason"]


def test_finished_by_adapter_by_last_step_and_by_run_json(tmp_path, children):
    root = tmp_path / "runs"
    a = root / "with-adapter"
    (a / "adapter").mkdir(parents=True)
    (a / "adapter" / "adapter_model.safetensors").write_bytes(safetensors(b"w" * 64))
    (a / "adapter" / "adapter_config.json").write_text("{}")
    write_progress(a, range(1, 50))
    # a server mapping the final adapter is using it, not training it
    sleeper(
        children,
        env=dict(os.environ, F=str(a / "adapter" / "adapter_model.safetensors")),
        code="import os,time; f=open(os.environ['F'],'rb'); time.sleep(120)",
    )
    empty_adapter = root / "empty-adapter"
    (empty_adapter / "adapter").mkdir(parents=True)
    last = root / "last-step"
    last.mkdir()
    write_progress(last, range(1, 160))
    rep = probe({"runs": [str(root)]})
    assert (run_of(rep, a)["state"], run_of(rep, a)["adapter"]) == ("finished", str(a / "adapter"))
    assert run_of(rep, a)["eta_seconds"] is None
    assert (
        run_of(rep, empty_adapter)["state"] == "unknown"
        and run_of(rep, empty_adapter)["adapter"] is None
    )
    assert run_of(rep, last)["state"] == "finished"


def test_folders_that_are_not_runs_are_left_out(tmp_path):
    root = tmp_path / "runs"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "readme.txt").write_text("hi")
    (root / "file.txt").write_text("x")
    rep = probe({"runs": [str(root), str(tmp_path / "missing-root")]})
    assert rep["runs"] == []


# -- GPUs, memory, disks ------------------------------------------------------------------------
def test_disks_behind_configured_folders(tmp_path):
    d = tmp_path / "a dir $(x)"
    d.mkdir()
    rep = probe({"disk_paths": [str(d), str(tmp_path / "not there" / "deeper"), str(d)]})
    assert [x["path"] for x in rep["disks"]] == [str(d), str(tmp_path / "not there" / "deeper")]
    ok, missing = rep["disks"]
    assert (
        ok["error"] is None and ok["total_bytes"] >= ok["used_bytes"] > 0 and ok["free_bytes"] > 0
    )
    assert ok["mount"].startswith("/") and ok["fstype"]
    assert "does not exist" in missing["error"] and missing["total_bytes"] == ok["total_bytes"]


def test_bad_requests_get_an_error_not_a_crash(tmp_path):
    nope = probe({"op": "nope"})
    assert (
        nope["ok"] is False
        and nope["error"]["code"] == "bad-request"
        and "'nope'" in nope["error"]["message"]
    )
    assert probe({"op": "ping"}) == {"ok": True}
    rep = probe({"runs": ["/proc/self/fd/0/nonsense", 5]})
    assert rep["runs"] == [] and any("runs" in w for w in rep["warnings"])


# -- resident, locally and over SSH ---------------------------------------------------------------
async def test_resident_probe_answers_many_polls_and_sees_appended_progress(tmp_path, children):
    run = tmp_path / "runs" / "run-1"
    run.mkdir(parents=True)
    write_progress(run, range(1, 6), extra='{"step": 6, "max_steps": 159, "lo')
    link = HostLink(HostConfig(name="local", local=True, python=sys.executable))
    helper = await link.start_helper(PROBE.read_text(), ["--resident"])
    try:
        req = {
            "op": "snapshot",
            "runs": [str(tmp_path / "runs")],
            "disk_paths": [str(tmp_path)],
            "stall_factor": 10,
        }
        await helper.send_json({"op": "ping"})
        assert await helper.recv_json() == {"ok": True}
        await helper.send_json(req)
        first = await helper.recv_json()
        assert run_of(first, run)["step"] == 5
        with (run / "progress.jsonl").open("a") as f:  # the torn line completes, two more follow
            f.write('ss": 2.9}\n' + json.dumps({"step": 7, "loss": 2.8}) + "\n")
            f.write(json.dumps({"step": 7, "eval_loss": 2.95}) + "\n")
        await helper.send_json(req)
        second = await helper.recv_json()
        r = run_of(second, run)
        assert (
            r["step"] == 7
            and r["losses"][-2:] == [[6, 2.9], [7, 2.8]]
            and r["eval_losses"] == [[7, 2.95]]
        )
        assert second["pid"] == first["pid"] and second["probe_cpu_s"] >= first["probe_cpu_s"]
        same_ids(first, second)
        (run / "progress.jsonl").write_text(
            json.dumps({"step": 1, "loss": 4.0}) + "\n"
        )  # rewritten
        await helper.send_json(req)
        assert run_of(await helper.recv_json(), run)["losses"] == [[1, 4.0]]
    finally:
        helper.stdin.write_eof()
        assert await helper.wait(10) == 0
        await link.close()


@pytest.mark.sshd
async def test_resident_probe_over_ssh_answers_two_polls_on_one_process(
    sshd_fleet, tmp_path, children
):
    from fleetdeck.backend.fleet.config import load_fleet

    h1 = sshd_fleet.hosts["h1"]
    run = h1.runs / "run-ssh"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    write_progress(run, range(1, 4))
    worker = sleeper(children, cwd=run)
    fleet = load_fleet(str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])))
    link = HostLink(fleet.host("h1"))
    helper = await link.start_helper(PROBE.read_text(), ["--resident"])
    try:
        req = {
            "op": "snapshot",
            "runs": [str(h1.runs)],
            "disk_paths": [str(h1.runs)],
            "stall_factor": 10,
        }
        replies = []
        for _ in range(3):
            await helper.send_json(req)
            replies.append(await helper.recv_json())
        assert len({r["pid"] for r in replies}) == 1, "one resident process answered every poll"
        for rep in replies:
            r = run_of(rep, run)
            assert (r["state"], r["pid"]) == ("running", worker.pid)
            pids = {s["pid"] for s in rep["schedules"]} | {x["pid"] for x in rep["runs"]}
            assert rep["pid"] not in pids
            # the probe's own hop (sshd's shell, the helper's boot) is never a stray loop; a
            # loop of another fleetdeck on this machine may be, so only its own are counted
            own = {rep["pid"], *procfs.ancestors(rep["pid"])}
            assert not [s for s in rep["schedules"] if s["kind"] == "loop" and s["pid"] in own]
        same_ids(replies[0], replies[2])
        assert replies[0]["disks"][0]["path"] == str(h1.runs)
    finally:
        helper.close()
        await link.close()
        worker.send_signal(signal.SIGKILL)


async def test_one_shot_through_run_helper_reads_its_request_from_stdin(tmp_path):
    (tmp_path / "runs" / "r1" / "checkpoints").mkdir(parents=True)
    link = HostLink(HostConfig(name="local", local=True, python=sys.executable))
    try:
        rep = await link.run_helper(
            PROBE.read_text(), {"op": "snapshot", "runs": [str(tmp_path / "runs")]}
        )
    finally:
        await link.close()
    assert [r["name"] for r in rep["runs"]] == ["r1"] and rep["disks"][0]["path"] == str(
        tmp_path / "runs"
    )


def python38() -> str | None:
    for cand in (shutil.which("python3.8"), *Path("/root/.pyenv/versions").glob("3.8*/bin/python")):
        if (
            cand
            and subprocess.run(
                [str(cand), "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                capture_output=True,
            ).returncode
            == 0
        ):
            return str(cand)
    return None


def test_the_probe_runs_on_python_3_8(tmp_path):
    OLD_PYTHON = python38()
    if OLD_PYTHON is None:
        pytest.skip("no Python 3.8 here to check the hosts' oldest Python")
    run = tmp_path / "runs" / "run-1"
    checkpoint(run, 25)
    p = subprocess.run(
        [OLD_PYTHON, "-", json.dumps({"runs": [str(tmp_path / "runs")]})],
        input=PROBE.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert run_of(rep, run)["eval_losses"] == [[25, 3.176]]
    assert not [w for w in rep["warnings"] if "Error" in w]
