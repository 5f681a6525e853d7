"""A serving seat as the controller holds it: the dataclass and its decoding from a host's JSON.

A leaf module (it imports nothing else from fleetdeck), so that the snapshot models can decode
the seats in a probe answer without importing the seats service (which polls and asks hosts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
            "pids": list(self.pids),
            "command": self.command,
        }


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def seat_from_json(host: str, d: dict[str, Any]) -> Seat:
    """A Seat from the host's dict (or from `seats --json`); unknown keys are ignored."""
    mem = d.get("memory_by_gpu") or {}
    return Seat(
        host=host,
        kind=str(d.get("kind", "")),
        port=_int(d.get("port")),
        model=d.get("model"),
        pid=_int(d.get("pid")),
        start_ticks=_int(d.get("start_ticks")),
        pids=tuple(p for p in d.get("pids") or () if isinstance(p, int)),
        flags={str(k): str(v) for k, v in (d.get("flags") or {}).items()},
        command=str(d.get("command") or ""),
        container=d.get("container") if isinstance(d.get("container"), dict) else None,
        restarts=_int(d.get("restarts")),
        oom_killed=d.get("oom_killed") if isinstance(d.get("oom_killed"), bool) else None,
        memory_by_gpu={int(k): float(v) for k, v in mem.items()} if isinstance(mem, dict) else {},
    )
