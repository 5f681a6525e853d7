"""Docker's facts of the containers a seat may run in, for the seats section: each one's name,
image, published ports, GPU ids, mounts, restart count, OOMKilled and restart policy, from one
`docker ps` and `docker inspect` (reused for a while by the resident probe), and the container
a process is in, by its cgroup."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import re
import time

from fleetdeck.backend.host.lib import docker as docker_query
from fleetdeck.backend.host.lib import procfs, runner
from fleetdeck.backend.host.probe import engines

IMAGE_KINDS = (
    ("vllm", "vllm"),
    ("sglang", "sglang"),
    ("text-generation-inference", "tgi"),
    ("llama.cpp", "llama.cpp"),
    ("llama-cpp", "llama.cpp"),
    ("ollama", "ollama"),
)
CONTAINER_ID = re.compile(r"([0-9a-f]{64})")


def container_of(pid: int) -> str | None:
    """The 64-hex container id in `pid`'s cgroup path, or None."""
    try:
        data = procfs.read_bytes("/proc/%d/cgroup" % pid).decode("ascii", "replace")
    except OSError:
        return None
    m = CONTAINER_ID.search(data)
    return m.group(1) if m else None


def docker_containers(
    docker: str | None = None, timeout: float = 5
) -> tuple[list[dict], str | None]:
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


def container_facts(d: dict) -> dict:
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
    pid = st.get("Pid")
    return {
        "id": str(d.get("Id", "")),
        "name": str(d.get("Name", "")).lstrip("/"),
        "image": str(cfg.get("Image", "")),
        "argv": [str(a) for a in argv],
        "pid": pid if isinstance(pid, int) and pid > 0 else None,
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


def _ports_of(d: dict) -> dict:
    ports = (d.get("NetworkSettings") or {}).get("Ports")
    return ports if isinstance(ports, dict) else {}


def image_kind(c: dict) -> str | None:
    """The engine a container runs, by its image's name, else by its command line."""
    image = c["image"].lower()
    for needle, kind in IMAGE_KINDS:
        if needle in image:
            return kind
    return engines.classify(c["argv"])


_DOCKER: dict = {"at": None, "value": ([], None)}


def docker_cached(docker: str | None, ttl: float) -> tuple[list[dict], str | None]:
    """`docker_containers`, reused for `ttl` seconds."""
    # the resident probe asks every poll; `docker ps` + `inspect` cost more than the whole
    # /proc scan, and containers rarely change between two polls a few seconds apart
    now = time.monotonic()
    if ttl and _DOCKER["at"] is not None and now - _DOCKER["at"] < ttl:
        return _DOCKER["value"]
    _DOCKER["value"], _DOCKER["at"] = docker_containers(docker), now
    return _DOCKER["value"]
