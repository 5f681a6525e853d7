"""Launch pre-flight: every run the probe sees running counts against `live-run`, not only
fleetdeck's own (a Hugging Face Trainer run has no run.json and no fleetdeck process)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from fleetdeck.backend.actions.launch.main import preflight
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.launch import liveruns
from fleetdeck.cli.main import main

from support.launch import base_values, fake_gpus, write_corpus, write_run_toml

pytestmark = pytest.mark.sshd


@pytest.fixture
def hf_run(sshd_fleet):
    """An HF Trainer run on h1 as the Trainer leaves it mid-training (checkpoint-N folders, no
    run.json), with a live process working in it."""
    run = sshd_fleet.hosts["h1"].runs / "hf-trainer run"
    ckpt = run / "checkpoint-10"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(
        json.dumps(
            {
                "global_step": 10,
                "max_steps": 100,
                "log_history": [{"step": 5, "loss": 2.5}, {"step": 10, "loss": 2.1}],
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], cwd=run
    )  # sleep(1) is a bystander
    yield run, proc.pid
    proc.kill()
    proc.wait()
    shutil.rmtree(run)


async def test_an_hf_trainer_run_the_probe_sees_is_named_by_live_run(sshd_fleet, tmp_path, hf_run):
    run, pid = hf_run
    fleet = load_fleet(str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])))
    host = fleet.host("h1")
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    async with HostLink(host) as link:
        pre = await preflight(link, base_values(sshd_fleet.hosts["h1"].runs, corpus, "mine"))
    check = next(c for c in pre.checks if c.name == "live-run")
    # this host has no GPU: a live run shares its CPU and is named, not refused
    assert f"{run} (pid {pid})" in check.message, check.message
    assert "no GPU on this host" in check.message


def test_an_hf_run_on_the_gpu_refuses_unless_forced(tmp_path):
    """What the probe saw, judged on a GPU host: the HF run is on GPU 0, as this one would be."""
    seen = [{"path": "/runs/hf-run", "pid": 4242, "name": "hf-run"}]

    def check(gpus, force=False, seen=seen):
        checks = []
        liveruns.check_live_runs(checks, {"gpus": 1}, gpus, [str(tmp_path)], None, force, seen)
        return checks[0]

    refused = check(fake_gpus((4242, "GPU-0")))
    assert not refused["ok"]
    # (a trainer another test runs on this machine may be named alongside)
    assert refused["message"].startswith("/runs/hf-run (pid 4242)")
    assert refused["message"].endswith("live on GPU 0; wait for it, or pass --force to share")
    assert check(fake_gpus((4242, "GPU-0")), force=True)["ok"]
    assert "4242" not in check(fake_gpus((4242, "GPU-1")))["message"]  # on the other GPU: no clash
    # a running run whose process the probe could not name cannot be placed: it counts
    nameless = check(fake_gpus(), seen=[{"path": "/runs/hf-run", "pid": None}])
    assert (
        not nameless["ok"] and "/runs/hf-run (pid unknown) is live on GPU 0" in nameless["message"]
    )


def test_cli_launch_names_the_hf_run(sshd_fleet, tmp_path, hf_run, capsys):
    run, pid = hf_run
    fleet = sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    toml = write_run_toml(
        tmp_path / "RUN.toml", **base_values(sshd_fleet.hosts["h1"].runs, corpus, "cli-mine")
    )
    # --json with a refusal of another check keeps the host untouched; the live-run line is there
    (sshd_fleet.hosts["h1"].runs / "cli-mine").mkdir(exist_ok=True)
    (sshd_fleet.hosts["h1"].runs / "cli-mine" / "stray.bin").write_bytes(b"x")
    rc = main(["--hosts", str(fleet), "launch", "h1", str(toml), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["reason"] == "output"
    live = next(c for c in doc["preflight"] if c["name"] == "live-run")
    assert f"{run} (pid {pid})" in live["message"]
