"""A serving seat as the controller holds it: the dataclass and its decoding from a host's JSON,
field by field from the seat finder's declaration (`backend/host/probe/seat_wire.py`, through
validate_records.py): each figure held to its type and bound, each text cut (they stay as the
host wrote them: the views escape them where they show them), the container read whole from
its record, and a seat whose kind is not text left out.

It imports only the checks, so that the snapshot models can decode the seats in a probe answer
without importing the seats service (which polls and asks hosts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetdeck.backend.fleet.validate_fields import (
    BadField,
    as_figure,
    as_text,
    as_whole,
    described,
)
from fleetdeck.backend.fleet.validate_records import MAX_LIST, read, read_object
from fleetdeck.backend.host.probe import seat_wire
from fleetdeck.backend.host.probe.wire import RECORD_BOUNDS


@dataclass(frozen=True)
class Seat:
    """One serving endpoint on a host (a process tree, a container, or both)."""

    host: str
    kind: str
    port: int | None
    model: str | None = None
    pid: int | None = None
    start_ticks: int | None = None
    pids: tuple[int, ...] = ()
    flags: dict[str, str] = field(default_factory=dict)
    command: str = ""
    container: dict[str, Any] | None = None
    restarts: int | None = None
    oom_killed: bool | None = None
    #: GPU index -> MiB this seat's processes hold there (filled from the GPU section)
    memory_by_gpu: dict[int, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Fleet-wide id: host, port and kind (a restarted seat keeps its key)."""
        return f"{self.host}:{self.port}:{self.kind}"

    @property
    def memory_mib(self) -> float:
        """What the seat holds on every card together."""
        return round(sum(self.memory_by_gpu.values()), 1)

    @property
    def gpus(self) -> list[int]:
        """Indices of the cards the seat holds memory on."""
        return sorted(self.memory_by_gpu)

    @property
    def name(self) -> str:
        """What the operator calls it: the container name, else kind and port."""
        if self.container and self.container.get("name"):
            return str(self.container["name"])
        return f"{self.kind}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        """The contract's seat object (plus pid, pids, per-card memory and the command)."""
        return {
            "host": self.host,
            "port": self.port,
            "kind": self.kind,
            "model": self.model,
            "gpus": self.gpus,
            "memory_mib": self.memory_mib,
            "memory_by_gpu": {str(k): v for k, v in sorted(self.memory_by_gpu.items())},
            "flags": dict(self.flags),
            "container": self.container,
            "restarts": self.restarts,
            "oom_killed": self.oom_killed,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "pids": list(self.pids),
            "command": self.command,
        }


#: the most pids, flags and cards a seat keeps
MAX_PIDS = 4096
MAX_FLAGS = MAX_LIST
MAX_CARDS = 1024


def seat_from_json(host: str, d: Any, marks: list[str] | None = None) -> Seat:
    """A Seat from the host's dict (or from `seats --json`), checked from its declaration:
    a bad figure is None and a bad pid, flag or card is left out, each noted in `marks`;
    unknown keys are ignored. BadField when it is not an object or its kind is not text."""
    marks = [] if marks is None else marks
    if not isinstance(d, dict):
        raise BadField("seat", f"not an object ({described(d)})")
    kw = read(d, seat_wire.SeatRecord, Seat, "seat", marks)
    container = d.get("container")
    if container is not None:
        try:
            container = read_object(container, seat_wire.ContainerRecord, "seat.container", marks)
        except BadField as e:
            marks.append(f"{e}: container left out")
            container = None
    return Seat(
        host=host,
        pids=_pids(d.get("pids"), marks),
        flags=_flags(d.get("flags"), marks),
        container=container,
        memory_by_gpu=_memory(d.get("memory_by_gpu"), marks),
        **kw,
    )


def _pids(v: Any, marks: list[str]) -> tuple[int, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        marks.append(f"pids: not a list ({described(v)})")
        return ()
    lo, hi = RECORD_BOUNDS["seat"]["pids"]
    out = []
    for p in v[:MAX_PIDS]:
        try:
            out.append(as_whole(p, "pids", lo, hi))
        except BadField as e:
            marks.append(f"{e} (left out)")
    return tuple(p for p in out if p is not None)


def _flags(v: Any, marks: list[str]) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        marks.append(f"flags: not an object ({described(v)})")
        return {}
    most = RECORD_BOUNDS["seat"]["flags"]
    out: dict[str, str] = {}
    for k, x in list(v.items())[:MAX_FLAGS]:
        try:
            out[str(as_text(k, "flags", limit=most))] = str(
                as_text(x, f"flags.{k!s:.40}", limit=most)
            )
        except BadField as e:
            marks.append(f"{e} (left out)")
    return out


def _memory(v: Any, marks: list[str]) -> dict[int, float]:
    """The controller's own figure, read back from `to_json`: card index -> MiB."""
    if not isinstance(v, dict):
        return {}
    out: dict[int, float] = {}
    for k, x in list(v.items())[:MAX_CARDS]:
        try:
            i = (
                int(k)
                if isinstance(k, (str, int)) and str(k).isascii() and str(k).isdigit()
                else None
            )
            mib = as_figure(x, "memory_by_gpu", 0.0, 1e12)
            if i is None or i >= MAX_CARDS or mib is None:
                raise BadField(
                    "memory_by_gpu", f"not a card's MiB ({described(k)}: {described(x)})"
                )
            out[i] = mib
        except BadField as e:
            marks.append(f"{e} (left out)")
    return out
