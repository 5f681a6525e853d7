"""Seat discovery: real processes whose argv are those of vLLM, llama.cpp and Ollama, listening
on real sockets, found from /proc on an sshd host; Docker facts from a `docker` test double
(this machine has the docker client but no engine), per-card headroom from GPU figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fleetdeck.backend.fleet.link.wire import record_refusal
from fleetdeck.backend.fleet.models import Gpu, GpuProcess, HostSnapshot
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.host.probe import engines as probe_engines
from fleetdeck.backend.host.probe import seats as probe_seats
from fleetdeck.backend.host.probe.wire import SeatRecord
from fleetdeck.backend.monitor.seats import attribute_memory, headroom

from support.seats import LISTENER

DOCKER = """#!/usr/bin/env python3
import json, sys
doc = json.load(open(%r))
if sys.argv[1:3] == ["ps", "-q"]:
    print("\\n".join(d["Id"] for d in doc))
elif sys.argv[1] == "inspect":
    print(json.dumps([d for d in doc if d["Id"] in sys.argv[2:]]))
else:
    sys.exit("unexpected docker call: %%s" %% sys.argv[1:])
"""


@pytest.fixture
def bin_dir(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("vllm", "llama-server", "ollama"):
        (d / name).write_text(LISTENER)
        (d / name).chmod(0o755)
    pkg = tmp_path / "pkg" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for p in (pkg, pkg.parent, pkg.parent.parent):
        (p / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(LISTENER)
    return d


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **env: str) -> tuple[subprocess.Popen, int]:
        p = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **env},
        )
        self.procs.append(p)
        return p, int(p.stdout.readline())

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()


@pytest.fixture
def procs():
    ps = Procs()
    yield ps
    ps.stop()


def _free_port() -> int:
    from support.sshfleet import free_port

    return free_port()


def by_pid(seats: list, pid: int):
    found = [s for s in seats if (s["pid"] if isinstance(s, dict) else s.pid) == pid]
    assert len(found) == 1, seats
    return found[0]


@pytest.mark.sshd
def test_seats_are_found_from_proc_on_an_sshd_host(fleet_file, bin_dir, procs, tmp_path, capsys):
    from fleetdeck.cli.main import main

    port = _free_port()
    vllm, _ = procs.start(
        [
            str(bin_dir / "vllm"),
            "serve",
            "/models/Qwen3-4B-AWQ",
            "--port",
            str(port),
            "--gpu-memory-utilization",
            "0.38",
            "--kv-cache-memory=2147483648",
            "--max-model-len",
            "32768",
            "--tensor-parallel-size",
            "1",
        ],
        SPAWN_WORKER="1",
    )
    api, _ = procs.start(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "tiny-m",
            "--port",
            str(_free_port()),
        ],
        PYTHONPATH=str(tmp_path / "pkg"),
    )
    llama, llama_port = procs.start(
        [str(bin_dir / "llama-server"), "-m", "/models/q.gguf", "-c", "8192"]
    )
    ollama_port = _free_port()
    ollama, _ = procs.start(
        [str(bin_dir / "ollama"), "serve"], OLLAMA_HOST=f"127.0.0.1:{ollama_port}"
    )
    time.sleep(0.5)  # the vLLM stand-in's worker is up and listening too
    rc = main(["--hosts", str(fleet_file), "seats", "--host", "h1", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    seats = [s for s in json.loads(out.out)["seats"] if s["host"] == "h1"]
    s = by_pid(seats, vllm.pid)
    assert (s["kind"], s["model"], s["port"]) == ("vllm", "/models/Qwen3-4B-AWQ", port)
    assert s["flags"] == {
        "--gpu-memory-utilization": "0.38",
        "--kv-cache-memory": "2147483648",
        "--max-model-len": "32768",
        "--tensor-parallel-size": "1",
    }
    # the worker it spawned belongs to the seat, never a second seat
    assert len(s["pids"]) == 2 and not [x for x in seats if x["pid"] in s["pids"][1:]]
    a = by_pid(seats, api.pid)
    assert (a["kind"], a["model"]) == ("vllm", "tiny-m")
    lc = by_pid(seats, llama.pid)
    # no --port: the port it really listens on, read from /proc, not llama.cpp's default 8080
    assert (lc["kind"], lc["model"], lc["port"], lc["flags"]) == (
        "llama.cpp",
        "/models/q.gguf",
        llama_port,
        {"-c": "8192"},
    )
    o = by_pid(seats, ollama.pid)
    assert o["kind"] == "ollama" and o["port"] == ollama_port
    assert all(x["container"] is None for x in (s, a, lc, o))


def test_docker_facts_join_the_seat_they_run(bin_dir, procs, tmp_path):
    vllm, port = procs.start([str(bin_dir / "vllm"), "serve", "m", "--port", str(_free_port())])
    docs = [
        {
            "Id": "a" * 64,
            "Name": "/seat-52",
            "RestartCount": 3,
            "Config": {
                "Image": "vllm/vllm-openai:v0.11",
                "Cmd": ["--model", "m", "--port", "8000"],
                "Env": [],
            },
            "State": {
                "Pid": vllm.pid,
                "Status": "running",
                "OOMKilled": True,
                "StartedAt": "2026-11-30T10:00:00Z",
            },
            "HostConfig": {
                "RestartPolicy": {"Name": "unless-stopped"},
                "DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["0"]}],
            },
            "NetworkSettings": {
                "Ports": {f"{port}/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8052"}]}
            },
            "Mounts": [{"Source": "/tank/models", "Destination": "/models"}],
        },
        {
            "Id": "b" * 64,
            "Name": "/seat-38",
            "RestartCount": 7,
            "Config": {
                "Image": "vllm/vllm-openai:v0.11",
                "Cmd": ["--model", "big", "--port", "8000", "--gpu-memory-utilization", "0.52"],
                "Env": ["NVIDIA_VISIBLE_DEVICES=0"],
            },
            "State": {"Pid": 0, "Status": "restarting", "OOMKilled": False},
            "HostConfig": {"RestartPolicy": {"Name": "always"}},
            "NetworkSettings": {"Ports": {"8000/tcp": [{"HostIp": "", "HostPort": "8038"}]}},
            "Mounts": [],
        },
        {
            "Id": "c" * 64,
            "Name": "/postgres",
            "RestartCount": 0,
            "Config": {"Image": "postgres:16"},
            "State": {"Pid": 0, "Status": "running"},
            "HostConfig": {},
            "NetworkSettings": {},
            "Mounts": [],
        },
    ]
    (tmp_path / "docker.json").write_text(json.dumps(docs))
    docker = bin_dir / "docker"
    docker.write_text(DOCKER % str(tmp_path / "docker.json"))
    docker.chmod(0o755)
    found = probe_seats.find_seats(docker=str(docker))
    assert found["docker"] is None
    for seat in found["seats"]:  # each one is what backend/host/probe/wire.py declares
        assert record_refusal(seat, SeatRecord) is None, seat
    s = by_pid(found["seats"], vllm.pid)
    assert s["port"] == 8052 and s["listen_port"] == port  # the published port, the one to check
    assert s["restarts"] == 3 and s["oom_killed"] is True
    c = s["container"]
    assert (c["name"], c["restart_policy"], c["gpus"]) == ("seat-52", "unless-stopped", ["0"])
    assert c["mounts"] == [{"source": "/tank/models", "destination": "/models"}]
    gone = [x for x in found["seats"] if x["container"] and x["container"]["name"] == "seat-38"]
    assert len(gone) == 1 and gone[0]["pid"] is None and gone[0]["port"] == 8038
    assert gone[0]["restarts"] == 7 and gone[0]["flags"] == {"--gpu-memory-utilization": "0.52"}
    assert gone[0]["container"]["gpus"] == ["0"] and gone[0]["container"]["status"] == "restarting"
    assert not [
        x for x in found["seats"] if x["container"] and x["container"]["name"] == "postgres"
    ]


def test_docker_that_does_not_answer_is_said_plainly(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    found = probe_seats.find_seats(docker=str(docker))
    assert found["docker"] == "Cannot connect to the Docker daemon"


@pytest.mark.parametrize(
    "argv,kind",
    [
        (["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
        (["/opt/venv/bin/vllm", "serve", "m"], "vllm"),
        (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
        (["text-generation-launcher", "--model-id", "m"], "tgi"),
        (["/app/llama-server", "-m", "x.gguf"], "llama.cpp"),
        (["/usr/local/bin/ollama", "serve"], "ollama"),
        (["/usr/local/bin/ollama", "runner", "--model", "x"], None),
        (["grep", "vllm serve"], None),
        (["python3", "train.py", "--note", "vllm"], None),
    ],
)
def test_engines_are_told_by_program_not_by_substring(argv, kind):
    assert probe_engines.classify(argv) == kind


def gpu(index: int, total: float, used: float, procs: list[tuple[int, float]]) -> Gpu:
    return Gpu(
        index=index,
        name="H100",
        uuid=f"GPU-{index}",
        unified_memory=False,
        memory_total_mib=total,
        memory_used_mib=used,
        utilization_pct=0,
        processes=tuple(GpuProcess(pid=p, user="svc", used_mib=m, command="x") for p, m in procs),
    )


def test_headroom_is_total_minus_what_every_process_holds():
    # the operator's card: two seats at 0.38 + 0.52 of 81,559 MiB and a stray notebook
    card = gpu(0, 81559, 0, [(100, 30992), (101, 1024), (200, 42411), (300, 2000)])
    other = gpu(1, 81559, 5000, [])  # the driver counts a process it cannot list
    seats = (
        Seat(host="h", kind="vllm", port=8038, pid=100, pids=(100, 101)),
        Seat(host="h", kind="vllm", port=8052, pid=200, pids=(200,), container={"name": "seat-52"}),
    )
    snap = HostSnapshot(name="h", reachable=True, gpus=(card, other), seats=seats)
    rooms = headroom(snap)
    assert rooms[0].free_mib == 81559 - 30992 - 1024 - 42411 - 2000
    assert rooms[0].shares == (("vllm:8038", 32016.0), ("seat-52", 42411.0))
    assert rooms[1].free_mib == 81559 - 5000 and rooms[1].shares == ()
    with_mem = attribute_memory(seats, snap.gpus)
    assert with_mem[0].memory_mib == 32016.0 and with_mem[0].gpus == [0]
    assert snap.to_json()["seats"][1]["memory_by_gpu"] == {}


@pytest.mark.sshd
async def test_the_probe_reports_seats_with_every_poll(sshd_fleet, tmp_path, bin_dir, procs):
    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.backend.fleet.poller import poll_fleet

    port = _free_port()
    vllm, _ = procs.start(
        [str(bin_dir / "vllm"), "serve", "m", "--port", str(port), "--max-model-len", "4096"]
    )
    fleet = load_fleet(str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", ["h1"])))
    snap = await poll_fleet(fleet)
    (h1,) = snap.hosts
    assert h1.seats is not None, h1.warnings
    s = by_pid(list(h1.seats), vllm.pid)
    assert (s.kind, s.port, s.flags) == ("vllm", port, {"--max-model-len": "4096"})
    assert by_pid(h1.to_json()["seats"], vllm.pid)["port"] == port
