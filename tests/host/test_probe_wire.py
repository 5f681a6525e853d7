"""The probe's answer declared once (`backend/host/probe/wire.py`): what a real probe sends, a
whole answer and a delta, is the declared `Answer`, every section's records with it, checked
by the controller's own reading of a declaration (`backend/fleet/link/wire.py`). The GPU
records of real answers (nvidia-smi and NVML stand-ins) are checked in test_probe_gpu.py."""

from __future__ import annotations

import json
import subprocess
import time

from fleetdeck.backend.fleet.link.wire import record_refusal
from fleetdeck.backend.host.lib import serve
from fleetdeck.backend.host.probe import wire
from fleetdeck.backend.host.probe.delta import Answers

from support.probe import probe, write_progress

LOOP = "while :; do sleep 0.2; done # fleetdeck-wire-test"


def test_a_real_answer_and_its_delta_are_the_declared_records(tmp_path, children):
    runs = tmp_path / "runs"
    run = runs / "alpha"
    (run / "checkpoint-10").mkdir(parents=True)
    (run / "checkpoint-10" / "config.json").write_text("{}")
    write_progress(run, range(1, 11))
    children.append(subprocess.Popen(["sh", "-c", LOOP]))
    time.sleep(0.5)
    req = {"runs": [str(runs)], "disk_paths": [str(runs), str(tmp_path / "gone")], "gpu": "none"}
    rep = probe(req)
    assert record_refusal(rep, wire.Answer) is None
    # not vacuous: every section the record declares has something in it here
    (r,) = rep["runs"]
    assert r["name"] == "alpha" and r["step"] == 10 and r["checkpoints"][0]["step"] == 10
    assert len(rep["disks"]) == 2 and rep["disks"][1]["error"]
    assert any("fleetdeck-wire-test" in s["command"] for s in rep["schedules"])
    assert rep["processes"] and rep["seats"] is not None and rep["gpus"] == []
    # the delta form: the unchanged sections named in `same`, the base answer's number
    answers = Answers()
    answers.framed(rep, None)
    delta = json.loads(serve.dumps(answers.framed(rep, 1)))
    assert delta["base"] == 1 and "runs" in delta["same"] and "runs" not in delta
    assert record_refusal(delta, wire.Answer) is None


def test_an_answer_of_another_shape_is_named_by_the_declaration():
    """The declaration is strict enough to catch a probe that drifted: a run's step as text,
    a disk without its mount."""
    rep = {
        "memory": {"total_bytes": 1, "used_bytes": 1},
        "load1": 0.1,
        "gpu_source": None,
        "warnings": [],
        "hostname": "h",
        "pid": 1,
        "time": 1.0,
        "probe_cpu_s": 0.1,
        "probe_children_cpu_s": 0.0,
        "seq": 1,
        "disks": [{"path": "/", "fstype": "ext4", "total_bytes": 1, "used_bytes": 1}],
    }
    assert record_refusal(rep, wire.Answer) == "disks[0] has no error"
    rep["disks"] = []
    assert record_refusal(rep, wire.Answer) is None
    rep["load1"] = "0.1"
    assert record_refusal(rep, wire.Answer) == "load1 is a string, not a number or null"
