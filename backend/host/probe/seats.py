"""Serving seats on this host: vLLM, SGLang, TGI, llama.cpp and Ollama, from /proc and Docker.

Host side (stdlib + host library, Python 3.8+): bundled with the probe, or run alone as a
helper (`{"op": "seats"}`). A seat is one serving process tree: its kind, the port it listens
on, the model it serves, the flags that decide its GPU memory, and every pid of its tree (the
controller attributes GPU memory to a seat from the GPU section's per-process figures, so no
number is measured twice). Where `docker` answers, each seat in a container gains the
container's name, image, published ports, GPU ids, mounts, restart count, OOMKilled and
restart policy; a serving container whose process is not visible (restarting, other pid
namespace) is still listed, from Docker's facts alone.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import re
import sys
import time

from fleetdeck.backend.host.lib import docker as docker_query
from fleetdeck.backend.host.lib import procfs, runner
from fleetdeck.backend.host.lib.serve import serve

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "tgi": 3000, "llama.cpp": 8080, "ollama": 11434}
# the flags that size a seat's memory and context, per engine (both `--f v` and `--f=v`)
MEMORY_FLAGS = (
    "--gpu-memory-utilization",
    "--kv-cache-memory",
    "--kv-cache-memory-bytes",
    "--max-model-len",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--quantization",
    "--dtype",
    "--cpu-offload-gb",
    "--mem-fraction-static",
    "--tp-size",
    "--tp",
    "--context-length",
    "--max-total-tokens",
    "--num-shard",
    "--cuda-memory-fraction",
    "--max-input-tokens",
    "--max-batch-prefill-tokens",
    "-c",
    "--ctx-size",
    "-ngl",
    "--n-gpu-layers",
    "-np",
    "--parallel",
)
MODEL_FLAGS = {
    "vllm": ("--model",),
    "sglang": ("--model-path", "--model"),
    "tgi": ("--model-id",),
    "llama.cpp": ("-m", "--model", "-hf", "--hf-repo"),
    "ollama": (),
}
IMAGE_KINDS = (
    ("vllm", "vllm"),
    ("sglang", "sglang"),
    ("text-generation-inference", "tgi"),
    ("llama.cpp", "llama.cpp"),
    ("llama-cpp", "llama.cpp"),
    ("ollama", "ollama"),
)
CONTAINER_ID = re.compile(r"([0-9a-f]{64})")
PYTHONS = re.compile(r"^python[0-9.]*$")
LISTEN = "0A"


def _base(arg):
    return arg.rpartition("/")[2]


def classify(argv):
    """The engine kind an argv belongs to, or None. The program is argv[0], or the script
    after a Python interpreter; `python -m MODULE` names the module."""
    if not argv:
        return None
    progs = [_base(argv[0])]
    if PYTHONS.match(progs[0]) and len(argv) > 1 and not argv[1].startswith("-"):
        progs.append(_base(argv[1]))
    modules = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"]
    for i, a in enumerate(argv[:3]):
        b = _base(a)
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if b == "vllm" and nxt == "serve":
            return "vllm"
        if b == "sglang" and nxt == "serve":
            return "sglang"
        if b == "ollama" and nxt == "serve":
            return "ollama"
    for m in modules:
        if m.startswith("vllm.entrypoints.openai.api_server") or m == "vllm.entrypoints.cli.main":
            return "vllm"
        if m.startswith("sglang.launch_server"):
            return "sglang"
    if "text-generation-launcher" in progs:
        return "tgi"
    if "llama-server" in progs:
        return "llama.cpp"
    return None


def flag_value(argv, names):
    """The value of the last of `names` in argv (`--f v` or `--f=v`), or None."""
    found = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                found = argv[i + 1]
            elif a.startswith(n + "="):
                found = a[len(n) + 1 :]
    return found


def memory_flags(argv):
    """{flag: value} of the memory-deciding flags present in argv."""
    out = {}
    for i, a in enumerate(argv):
        name, eq, val = a.partition("=")
        if name in MEMORY_FLAGS:
            if eq:
                out[name] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[name] = argv[i + 1]
            else:
                out[name] = ""
    return out


def served_model(kind, argv):
    """The model a seat serves, from its argv (`vllm serve MODEL` or the engine's flag)."""
    m = flag_value(argv, MODEL_FLAGS.get(kind, ()))
    if m is None and kind == "vllm" and "serve" in argv:
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            m = argv[i + 1]
    if m is None and kind == "llama.cpp":
        m = flag_value(argv, ("--alias", "-a"))
    return m


def _listening_inodes(pid):
    """{socket inode: port} of TCP sockets in LISTEN state in `pid`'s network namespace."""
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            data = procfs.read_bytes("/proc/%d/net/%s" % (pid, name)).decode("ascii", "replace")
        except OSError:
            continue
        for line in data.splitlines()[1:]:
            f = line.split()
            if len(f) > 9 and f[3] == LISTEN:
                try:
                    out[int(f[9])] = int(f[1].rpartition(":")[2], 16)
                except ValueError:
                    pass
    return out


def listening_ports(pids):
    """Ports the processes `pids` listen on (TCP), lowest first; [] when unreadable."""
    ports = set()
    table = None
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if not target.startswith("socket:["):
                continue
            if table is None:
                table = _listening_inodes(pid)
            inode = int(target[8:-1])
            if inode in table:
                ports.add(table[inode])
    return sorted(ports)


def _ollama_port(pid):
    try:
        env = procfs.read_bytes("/proc/%d/environ" % pid).split(b"\0")
    except OSError:
        return None
    for e in env:
        if e.startswith(b"OLLAMA_HOST="):
            port = e[12:].decode("ascii", "replace").rpartition(":")[2]
            return int(port) if port.isdigit() else None
    return None


def _container_of(pid):
    """The 64-hex container id in `pid`'s cgroup path, or None."""
    try:
        data = procfs.read_bytes("/proc/%d/cgroup" % pid).decode("ascii", "replace")
    except OSError:
        return None
    m = CONTAINER_ID.search(data)
    return m.group(1) if m else None


def docker_containers(docker=None, timeout=5):
    """(list of container facts, None) where Docker answers, else ([], the reason)."""
    q = docker_query.query(exe=docker, timeout=timeout)
    if not q["exe"]:
        return [], "docker not found"
    r = q["result"]
    if q["failed"] == "ps":
        return [], runner.first_line(r.err) or "docker ps exited %d" % r.rc
    if q["failed"] == "inspect":
        return [], runner.first_line(r.err) or "docker inspect exited %d" % r.rc
    if q["failed"] == "json":
        return [], "docker inspect did not answer JSON"
    return [container_facts(d) for d in q["docs"] if isinstance(d, dict)], None


def container_facts(d):
    """The facts fleetdeck keeps from one `docker inspect` document."""
    cfg = d.get("Config") or {}
    hc = d.get("HostConfig") or {}
    st = d.get("State") or {}
    gpus = []
    for req in hc.get("DeviceRequests") or ():
        if not isinstance(req, dict):
            continue
        if req.get("DeviceIDs"):
            gpus += [str(x) for x in req["DeviceIDs"]]
        elif req.get("Count") == -1:
            gpus.append("all")
    for e in cfg.get("Env") or ():
        if isinstance(e, str) and e.startswith("NVIDIA_VISIBLE_DEVICES=") and not gpus:
            gpus = [x for x in e.split("=", 1)[1].split(",") if x and x != "void"]
    ports = []
    for cport, binds in sorted(_ports_of(d).items()):
        num, _, proto = cport.partition("/")
        for b in binds or ():
            if isinstance(b, dict) and str(b.get("HostPort", "")).isdigit() and num.isdigit():
                ports.append(
                    {
                        "container_port": int(num),
                        "host_port": int(b["HostPort"]),
                        "host_ip": b.get("HostIp") or "",
                        "proto": proto or "tcp",
                    }
                )
    argv = list(cfg.get("Entrypoint") or []) + list(cfg.get("Cmd") or [])
    return {
        "id": str(d.get("Id", "")),
        "name": str(d.get("Name", "")).lstrip("/"),
        "image": str(cfg.get("Image", "")),
        "argv": [str(a) for a in argv],
        "pid": st.get("Pid") if isinstance(st.get("Pid"), int) and st.get("Pid") > 0 else None,
        "status": st.get("Status"),
        "started_at": st.get("StartedAt"),
        "restarts": d.get("RestartCount") if isinstance(d.get("RestartCount"), int) else None,
        "oom_killed": bool(st.get("OOMKilled")),
        "restart_policy": ((hc.get("RestartPolicy") or {}).get("Name") or None),
        "gpus": gpus,
        "ports": ports,
        "mounts": [
            {"source": m.get("Source"), "destination": m.get("Destination")}
            for m in d.get("Mounts") or ()
            if isinstance(m, dict)
        ],
    }


def _ports_of(d):
    ports = (d.get("NetworkSettings") or {}).get("Ports")
    return ports if isinstance(ports, dict) else {}


def _image_kind(c):
    image = c["image"].lower()
    for needle, kind in IMAGE_KINDS:
        if needle in image:
            return kind
    return classify(c["argv"])


_DOCKER: dict = {"at": None, "value": ([], None)}


def _docker_cached(docker, ttl):
    # the resident probe asks every poll; `docker ps` + `inspect` cost more than the whole
    # /proc scan, and containers rarely change between two polls a few seconds apart
    now = time.monotonic()
    if ttl and _DOCKER["at"] is not None and now - _DOCKER["at"] < ttl:
        return _DOCKER["value"]
    _DOCKER["value"], _DOCKER["at"] = docker_containers(docker), now
    return _DOCKER["value"]


def find_seats(docker=None, use_docker=True, docker_ttl=0):
    """Every serving seat on this host (see the module docstring), plus Docker's state:
    `{"seats": [...], "docker": null | "why it did not answer"}`. `docker_ttl`: seconds a
    Docker listing is reused (the resident probe passes 30)."""
    me = os.getpid()
    mine = set(procfs.ancestors()) | {me}
    argvs = {}
    kinds = {}
    for pid in procfs.pids():
        if pid in mine:
            continue
        argv = procfs.cmdline(pid)
        kind = classify(argv)
        if kind:
            argvs[pid], kinds[pid] = argv, kind
    # a seat is the top of its tree: workers and engine cores under it belong to it
    tops = [p for p in kinds if not any(a in kinds for a in procfs.ancestors(p))]
    containers, docker_error = (
        _docker_cached(docker, docker_ttl) if use_docker else ([], "not asked")
    )
    by_init = {c["pid"]: c for c in containers if c["pid"]}
    by_id = {c["id"]: c for c in containers}
    seats, claimed = [], set()
    for pid in sorted(tops):
        argv, kind = argvs[pid], kinds[pid]
        tree = [pid] + procfs.descendants(pid)
        c = None
        for a in [pid] + procfs.ancestors(pid):
            if a in by_init:
                c = by_init[a]
                break
        if c is None:
            c = by_id.get(_container_of(pid) or "")
        # the port asked for when something listens there; else what the top process itself
        # listens on (workers listen too: NCCL stores, ZMQ); else the engine's default
        p = flag_value(argv, ("--port",))
        asked = int(p) if p and p.isdigit() else (_ollama_port(pid) if kind == "ollama" else None)
        own, every = listening_ports([pid]), listening_ports(tree)
        if asked is not None and asked in every:
            port = asked
        elif own or every:
            port = (own or every)[0]
        else:
            port = asked if asked is not None else DEFAULT_PORTS.get(kind)
        seat = _seat(kind, served_model(kind, argv), port, memory_flags(argv), argv, pid, tree, c)
        if c is not None:
            claimed.add(c["id"])
        seats.append(seat)
    for c in containers:
        kind = _image_kind(c)
        if kind and c["id"] not in claimed:
            cport = flag_value(c["argv"], ("--port",))
            port = int(cport) if cport and cport.isdigit() else DEFAULT_PORTS.get(kind)
            seats.append(
                _seat(
                    kind,
                    served_model(kind, c["argv"]),
                    port,
                    memory_flags(c["argv"]),
                    c["argv"],
                    None,
                    [],
                    c,
                )
            )
    return {"seats": seats, "docker": docker_error}


def _seat(kind, model, port, flags, argv, pid, tree, c):
    listen_port = port
    if c is not None:
        for p in c["ports"]:
            if p["container_port"] == port:
                port = p["host_port"]
                break
    return {
        "kind": kind,
        "model": model,
        "port": port,
        "listen_port": listen_port,
        "pid": pid,
        "start_ticks": procfs.start_ticks(pid) if pid else None,
        "pids": tree,
        "flags": flags,
        "command": " ".join(argv)[:300],
        "container": None
        if c is None
        else {
            k: c[k]
            for k in (
                "id",
                "name",
                "image",
                "status",
                "started_at",
                "restart_policy",
                "gpus",
                "ports",
                "mounts",
            )
        },
        "restarts": None if c is None else c["restarts"],
        "oom_killed": None if c is None else c["oom_killed"],
    }


def _op_seats(req):
    return find_seats(docker=req.get("docker"), use_docker=req.get("use_docker", True))


if __name__ == "__main__":
    sys.exit(serve({"seats": _op_seats}))
