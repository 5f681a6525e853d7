"""Run files, corpora and a loopback sshd host for the launch tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetdeck.backend.host.launch import estimate as est
from fleetdeck.cli.main import main

HOSTILE = "-r $(touch pwned) 'q\" x"


def write_run_toml(path, **values):
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_corpus(path, docs=40):
    with open(path, "w") as f:
        for i in range(docs):
            f.write(
                json.dumps(
                    {"text": f"document {i}: the quick brown fox jumps over the lazy dog. " * 2}
                )
                + "\n"
            )
    return path


@pytest.fixture
def h1(sshd_fleet, tmp_path):
    """(fleet file naming h1 only, the host's runs root, a corpus on the host)."""
    fleet = sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])
    runs = sshd_fleet.hosts["h1"].runs
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    return fleet, runs, corpus


def launch_cli(capsys, fleet, *args):
    rc = main(["--hosts", str(fleet), "launch", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def manifest(run: Path) -> dict:
    """A run folder's run.json, or {} while it is missing or half written."""
    try:
        return json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(pred, what: str, limit: float = 240.0, step: float = 0.1):
    """Poll until pred() is truthy; the limit only guards against a hang."""
    deadline = time.monotonic() + limit
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(step)


def base_values(runs, corpus, name, **extra):
    v = dict(
        name="t",
        base_model="random:tiny",
        corpus=str(corpus),
        output=str(runs / name),
        seq_len=32,
        batch_size=2,
        grad_accum=1,
        max_steps=3,
        save_steps=2,
        eval_steps=2,
    )
    v.update(extra)
    return v


def fake_gpus(*apps):
    gpus = [
        {"index": i, "uuid": f"GPU-{i}", "name": "H200", "unified": False, "free": 100 * est.GIB}
        for i in range(2)
    ]
    return {
        "gpus": gpus,
        "apps": [{"pid": pid, "uuid": uuid, "used": est.GIB} for pid, uuid in apps],
        "error": None,
    }
