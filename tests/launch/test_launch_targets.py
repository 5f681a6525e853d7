"""Pre-flight resolves `target_modules` against the base model when its modules can be known
before it is built (a built-in architecture, a local safetensors checkpoint) and refuses a
name that matches nothing; the trainer's refusal names the way to a host ready to train. Over a
real loopback sshd host."""

from __future__ import annotations

import json
import struct

import pytest

from fleetdeck.backend.actions.audit import read_audit

from support.launch import base_values, launch_cli, write_run_toml

pytestmark = pytest.mark.sshd


def test_a_target_module_the_built_in_architecture_lacks_is_refused_before_start(
    h1,  # noqa: F811
    tmp_path,
    capsys,
):
    fleet, runs, corpus = h1
    toml = write_run_toml(
        tmp_path / "RUN.toml", **base_values(runs, corpus, "typo", target_modules=["q_prj"])
    )
    rc, out, err = launch_cli(capsys, fleet, "h1", toml, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["state"] == "refused" and doc["reason"] == "target-modules"
    msg = next(c["message"] for c in doc["preflight"] if c["name"] == "target-modules")
    assert (
        "'q_prj' matches no Linear module of the base model (built-in architecture tiny has" in msg
    )
    assert "q_proj" in msg and not (runs / "typo").exists()
    assert read_audit()[-1]["reason"] == "target-modules"


def safetensors(path, tensors):
    header = json.dumps(
        {
            name: {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}
            for name, shape in tensors.items()
        }
    ).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_a_local_checkpoints_modules_are_read_from_its_safetensors_headers(h1, tmp_path, capsys):  # noqa: F811
    fleet, runs, corpus = h1
    base = tmp_path / "base model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    safetensors(
        base / "model.safetensors",
        {
            "model.layers.0.attn.qkv.weight": [8, 4],
            "model.layers.0.mlp.fc1.weight": [16, 4],
            "model.norm.weight": [4],
        },
    )
    for targets, ok in (
        (["qkv", "fc1"], True),
        (["q_proj"], False),
        (["norm"], False),
        (["model.layers.0.attn.qkv"], True),
    ):
        pre_toml = write_run_toml(
            tmp_path / "RUN.toml",
            **base_values(runs, corpus, "local", base_model=str(base), target_modules=targets),
        )
        rc, out, err = launch_cli(capsys, fleet, "h1", pre_toml, "--json")
        check = next(c for c in json.loads(out)["preflight"] if c["name"] == "target-modules")
        assert check["ok"] is ok, (targets, check)
        if not ok:
            assert "safetensors headers" in check["message"] and "fc1, qkv" in check["message"]


def test_a_host_whose_python_cannot_train_is_told_the_way_to_a_venv(tmp_path, capsys):
    """The fleet's `python` for the host is a new venv's, without the trainer: the refusal names it, what it lacks, and the venv and `python` key that fix
    it."""
    import subprocess
    import sys

    from fleetdeck.cli.main import main

    from support.launch import write_corpus

    venv = tmp_path / "bare venv"
    subprocess.run(
        [sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True
    )
    bare = venv / "bin" / "python"
    runs = tmp_path / "runs"
    runs.mkdir()
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(f'[hosts.local]\nlocal = true\nruns = ["{runs}"]\npython = "{bare}"\n')
    toml = write_run_toml(
        tmp_path / "RUN.toml", **base_values(runs, write_corpus(tmp_path / "c.jsonl"), "r")
    )
    rc = main(["--hosts", str(fleet), "launch", "local", str(toml), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["reason"] == "trainer"
    msg = next(c["message"] for c in doc["preflight"] if c["name"] == "trainer")
    assert (
        msg.startswith(f"{bare} cannot import ")
        and "make a venv there with fleetdeck[train]" in msg
    )
    assert "set this host's python to its interpreter in the fleet file" in msg
