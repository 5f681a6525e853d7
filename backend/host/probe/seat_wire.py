"""The seat finder's records, as it sends them (probe/seats.py, in the probe's answer and in
the seats helper's): a serving process tree, the flags that decide its memory and its
container's facts. Their bounds and raw texts are in wire.py (`RECORD_BOUNDS`, `RAW_TEXTS`,
under `seat`, `seat.container`...); the controller checks them field by field from here
(`backend/fleet/seat_model.py`). Python 3.8, imported under `TYPE_CHECKING` only on a host."""
# Runs on the host's Python 3.8 or newer.

from typing import Dict, List, Optional, TypedDict


class ContainerPortRecord(TypedDict):
    """A published port of a seat's container (probe/containers.py)."""

    container_port: int
    host_port: int
    host_ip: str
    proto: str


class ContainerMountRecord(TypedDict):
    """A mount of a seat's container: the host's path and the container's."""

    source: Optional[str]
    destination: Optional[str]


class ContainerRecord(TypedDict):
    """What fleetdeck keeps of a seat's container (`docker inspect`, probe/containers.py)."""

    id: str
    name: str
    image: str
    status: Optional[str]
    started_at: Optional[str]
    restart_policy: Optional[str]
    gpus: List[str]
    ports: List[ContainerPortRecord]
    mounts: List[ContainerMountRecord]


class SeatRecord(TypedDict):
    """A serving process tree (probe/seats.py): its kind, model, port, processes, the flags
    that decide its memory and, in a container, the container's facts."""

    kind: str
    model: Optional[str]
    port: Optional[int]
    listen_port: Optional[int]
    pid: Optional[int]
    start_ticks: Optional[int]
    pids: List[int]
    flags: Dict[str, str]
    command: str
    container: Optional[ContainerRecord]
    restarts: Optional[int]
    oom_killed: Optional[bool]


__all__ = ["ContainerMountRecord", "ContainerPortRecord", "ContainerRecord", "SeatRecord"]
