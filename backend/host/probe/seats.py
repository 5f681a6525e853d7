"""Serving seats on this host: vLLM, SGLang, TGI, llama.cpp and Ollama, from /proc and Docker.

Host side (stdlib + host library, Python 3.8+): bundled with the probe, or run alone as a
helper (`{"op": "seats"}`). A seat is one serving process tree: its kind, the port it listens
on, the model it serves, the flags that decide its GPU memory, and every pid of its tree (the
controller attributes GPU memory to a seat from the GPU section's per-process figures, so no
number is measured twice). Where `docker` answers, each seat in a container gains the
container's name, image, published ports, GPU ids, mounts, restart count, OOMKilled and
restart policy; a serving container whose process is not visible (restarting, other pid
namespace) is still listed, from Docker's facts alone. What a command line says is read in
`engines`, Docker's facts in `containers`; this module finds the trees and their ports.
"""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from fleetdeck.backend.host.lib import procfs
from fleetdeck.backend.host.lib.serve import serve
from fleetdeck.backend.host.probe import containers, engines

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from typing import Any

    from fleetdeck.backend.host.probe.seat_wire import SeatRecord

LISTEN = "0A"
#: engine kind ("" for none) by raw command line: a command line classified once
_KINDS: dict = {}


def _listening_inodes(pid: int) -> dict[int, int]:
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


def listening_ports(pids: Iterable[int]) -> list[int]:
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


def _ollama_port(pid: int) -> int | None:
    try:
        env = procfs.read_bytes("/proc/%d/environ" % pid).split(b"\0")
    except OSError:
        return None
    for e in env:
        if e.startswith(b"OLLAMA_HOST="):
            port = e[12:].decode("ascii", "replace").rpartition(":")[2]
            return int(port) if port.isdigit() else None
    return None


def _candidates(procs: Any) -> dict[int, tuple[list[str], str]]:
    """{pid: (argv, engine kind)} of every process whose command line names a serving engine,
    the probe and its ancestors aside: from the poll's own look at /proc (`procs`, a
    `common.Procs`) when given, else read here."""
    found = {}
    if procs is not None:
        for pid in procs.others():
            raw = procs.raw[pid]
            kind = _KINDS.get(raw)
            if kind is None:
                kind = _KINDS[raw] = engines.classify(raw.rstrip("\0").split("\0")) or ""
            if kind:
                found[pid] = (raw.rstrip("\0").split("\0"), kind)
        if len(_KINDS) > 4 * len(procs.raw) + 1024:  # command lines come and go
            _KINDS.clear()
        return found
    mine = set(procfs.ancestors()) | {os.getpid()}
    for pid in procfs.pids():
        if pid in mine:
            continue
        argv = procfs.cmdline(pid)
        kind = engines.classify(argv)
        if kind:
            found[pid] = (argv, kind)
    return found


def find_seats(
    docker: str | None = None,
    use_docker: bool = True,
    docker_ttl: float = 0,
    procs: Any = None,
) -> dict:
    """Every serving seat on this host (see the module docstring), plus Docker's state:
    `{"seats": [...], "docker": null | "why it did not answer"}`. `docker_ttl`: seconds a
    Docker listing is reused (the resident probe passes 30); `procs`: the poll's look at /proc,
    so that a probe walks it once."""
    cand = _candidates(procs)
    argvs = {pid: c[0] for pid, c in cand.items()}
    kinds = {pid: c[1] for pid, c in cand.items()}
    # a seat is the top of its tree: workers and engine cores under it belong to it
    tops = [p for p in kinds if not any(a in kinds for a in procfs.ancestors(p))]
    found, docker_error = (
        containers.docker_cached(docker, docker_ttl) if use_docker else ([], "not asked")
    )
    by_init = {c["pid"]: c for c in found if c["pid"]}
    by_id = {c["id"]: c for c in found}
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
            c = by_id.get(containers.container_of(pid) or "")
        # the port asked for when something listens there; else what the top process itself
        # listens on (workers listen too: NCCL stores, ZMQ); else the engine's default
        p = engines.flag_value(argv, ("--port",))
        asked = int(p) if p and p.isdigit() else (_ollama_port(pid) if kind == "ollama" else None)
        own, every = listening_ports([pid]), listening_ports(tree)
        if asked is not None and asked in every:
            port = asked  # type: int | None
        elif own or every:
            port = (own or every)[0]
        else:
            port = asked if asked is not None else engines.DEFAULT_PORTS.get(kind)
        seat = _seat(
            kind,
            engines.served_model(kind, argv),
            port,
            engines.memory_flags(argv),
            argv,
            pid,
            tree,
            c,
        )
        if c is not None:
            claimed.add(c["id"])
        seats.append(seat)
    for c in found:
        image = containers.image_kind(c)
        if image and c["id"] not in claimed:
            cport = engines.flag_value(c["argv"], ("--port",))
            port = int(cport) if cport and cport.isdigit() else engines.DEFAULT_PORTS.get(image)
            seats.append(
                _seat(
                    image,
                    engines.served_model(image, c["argv"]),
                    port,
                    engines.memory_flags(c["argv"]),
                    c["argv"],
                    None,
                    [],
                    c,
                )
            )
    return {"seats": seats, "docker": docker_error}


def _seat(
    kind: str,
    model: str | None,
    port: int | None,
    flags: dict[str, Any],
    argv: list[str],
    pid: int | None,
    tree: list[int],
    c: dict[str, Any] | None,
) -> SeatRecord:
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
            "id": c["id"],
            "name": c["name"],
            "image": c["image"],
            "status": c["status"],
            "started_at": c["started_at"],
            "restart_policy": c["restart_policy"],
            "gpus": c["gpus"],
            "ports": c["ports"],
            "mounts": c["mounts"],
        },
        "restarts": None if c is None else c["restarts"],
        "oom_killed": None if c is None else c["oom_killed"],
    }


def _op_seats(req: dict) -> dict:
    return find_seats(docker=req.get("docker"), use_docker=req.get("use_docker", True))


if __name__ == "__main__":
    sys.exit(serve({"seats": _op_seats}))
