"""Serving seats, controller side: typed seats, GPU memory per seat, card headroom, seat checks.

The host says what runs (`probe_seats.find_seats`, bundled with the probe or run as a helper);
this module joins it with the GPU section of the same host's snapshot: a seat holds what its
process tree holds on each card (NVML per-process figures), and a card's headroom is its total
minus what every process on it holds (or minus the driver's `used`, when that is larger: a
process in another pid namespace is counted by the driver even when it is not listed).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetdeck.backend.actions.fronts import seat_check
from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.errors import HelperError, HostError
from fleetdeck.backend.fleet.models import unreachable_json
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.fleet.seat_model import Seat, seat_from_json
from fleetdeck.backend.fleet.validate import check_section

if TYPE_CHECKING:
    from fleetdeck.backend.fleet.config import Fleet
    from fleetdeck.backend.fleet.link.ssh import HostLink
    from fleetdeck.backend.fleet.models import Gpu, HostSnapshot

SEATS_HELPER = "fleetdeck.backend.host.probe.seats"
CHECK_HELPER = "fleetdeck.backend.host.seat_check.main"
DEFAULT_HEADROOM_FLOOR_MIB = 6 * 1024


def attribute_memory(
    seats: tuple[Seat, ...] | list[Seat], gpus: tuple[Gpu, ...]
) -> tuple[Seat, ...]:
    """Seats with `memory_by_gpu` filled from the GPU section's per-process figures."""
    out = []
    for s in seats:
        tree = set(s.pids) | ({s.pid} if s.pid else set())
        mem: dict[int, float] = {}
        for g in gpus:
            held = sum(p.used_mib for p in g.processes if p.pid in tree)
            if held:
                mem[g.index] = round(held, 1)
        out.append(replace(s, memory_by_gpu=mem or s.memory_by_gpu))
    return tuple(out)


@dataclass(frozen=True)
class Headroom:
    """One card: total, what every process holds, what is left, and each seat's share."""

    host: str
    gpu: int
    uuid: str
    total_mib: float
    held_mib: float
    shares: tuple[tuple[str, float], ...]

    @property
    def free_mib(self) -> float:
        return max(0.0, round(self.total_mib - self.held_mib, 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu": self.gpu,
            "uuid": self.uuid,
            "total_mib": self.total_mib,
            "held_mib": self.held_mib,
            "headroom_mib": self.free_mib,
            "seats": [{"seat": n, "memory_mib": m} for n, m in self.shares],
        }


def headroom(host: HostSnapshot) -> list[Headroom]:
    """Per card of `host`: total minus what every process holds (see the module docstring)."""
    return _headroom_of(host, host_seats(host))


def host_seats(host: HostSnapshot) -> tuple[Seat, ...]:
    """The seats of a snapshot with their GPU memory attributed ( () when none were reported)."""
    seats = getattr(host, "seats", None) or ()
    return attribute_memory(seats, host.gpus) if seats else ()


async def fetch_seats(
    link: HostLink, docker: str | None = None, timeout: float | None = None
) -> tuple[list[Seat], str | None]:
    """Run the seat finder on the host as a helper: (seats, why Docker did not answer)."""
    req: dict[str, Any] = {"docker": docker} if docker else {}
    try:
        ans = await link.call(
            SEATS_HELPER, "seats", **req, within=timeout or link.host.command_timeout
        )
    except HelperError as e:
        raise HostError(
            link.name, f"seat finder failed: {e.error.get('message', e.answer)}", "helper"
        ) from None
    # each seat checked as a probe answer's are: a bad one left out, its figures bounded
    seats, _ = check_section(link.name, "seats", ans.get("seats") or [])
    return list(seats or ()), ans.get("docker")


async def seats_for(
    fleet: Fleet, hosts: list[str] | None = None, docker: str | None = None
) -> dict[str, Any]:
    """Every seat of the fleet (or of `hosts`) with memory attributed and card headroom:
    `{"seats": [Seat], "headroom": [Headroom], "unreachable": [{name, host, error, error_code}], "docker": {host: why}}`.
    The poll's own seats are used where the probe reported them; the seat finder runs as a
    helper where it did not (or when `docker` names another docker client)."""

    async def reported(h: HostSnapshot) -> tuple[list[Seat], str | None]:
        return list(h.seats or ()), None

    poller = Poller(fleet)
    try:
        snap = await poller.poll(hosts)
        up = [h for h in snap.hosts if h.reachable]
        found = await asyncio.gather(
            *(
                fetch_seats(poller.link(h.name), docker)
                if docker or h.seats is None
                else reported(h)
                for h in up
            ),
            return_exceptions=True,
        )
    finally:
        await poller.close()
    seats: list[Seat] = []
    rooms: list[Headroom] = []
    unreachable = [
        unreachable_json(h.name, h.error, h.error_code) for h in snap.hosts if not h.reachable
    ]
    docker_state: dict[str, str | None] = {}
    for h, res in zip(up, found, strict=True):
        if isinstance(res, HostError):
            unreachable.append(unreachable_json(h.name, res.message, res.code))
            continue
        if isinstance(res, BaseException):
            unreachable.append(unreachable_json(h.name, f"{type(res).__name__}: {res}"))
            continue
        mine, docker_state[h.name] = res
        with_mem = attribute_memory(mine, h.gpus)
        seats.extend(with_mem)
        rooms.extend(_headroom_of(h, with_mem))
    return {"seats": seats, "headroom": rooms, "unreachable": unreachable, "docker": docker_state}


def _headroom_of(host: HostSnapshot, seats: tuple[Seat, ...]) -> list[Headroom]:
    out = []
    for g in host.gpus:
        if g.memory_total_mib is None:  # the host did not say: no headroom to show
            continue
        held = max(sum(p.used_mib for p in g.processes), g.memory_used_mib or 0.0)
        shares = tuple(
            (s.name, s.memory_by_gpu[g.index]) for s in seats if g.index in s.memory_by_gpu
        )
        out.append(
            Headroom(
                host=host.name,
                gpu=g.index,
                uuid=g.uuid,
                total_mib=g.memory_total_mib,
                held_mib=round(held, 1),
                shares=shares,
            )
        )
    return out


@dataclass(frozen=True)
class SeatCheck:
    """The verdict of one seat check; `sound` only when the completion and logprobs were, and
    only with its witness: the completion tokens it got back and the logprobs it judged finite
    (`completion_tokens`, `logprobs`, both above zero)."""

    host: str
    port: int
    sound: bool
    signature: str | None
    message: str
    model: str | None = None
    endpoint: str | None = None
    requests: int = 0
    content: str | None = None
    completion_tokens: int | None = None
    seconds: float | None = None
    checked_at: float = 0.0
    #: how many logprobs were judged finite log-probabilities
    logprobs: int | None = None

    @property
    def key(self) -> str:
        """`host:port`: the seat it judged."""
        return f"{self.host}:{self.port}"

    @property
    def witness(self) -> str:
        """What a sound verdict rests on, in a few words (`8 tokens, 16 logprobs finite`)."""
        return f"{self.completion_tokens or 0} tokens, {self.logprobs or 0} logprobs finite"

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "sound": self.sound,
            "signature": self.signature,
            "message": self.message,
            "model": self.model,
            "endpoint": self.endpoint,
            "requests": self.requests,
            "content": self.content,
            "completion_tokens": self.completion_tokens,
            "logprobs": self.logprobs,
            "seconds": self.seconds,
            "checked_at": self.checked_at,
        }


def check_from_json(d: dict[str, Any]) -> SeatCheck:
    """A SeatCheck back from `to_json()`."""
    return SeatCheck(
        host=str(d["host"]),
        port=int(d["port"]),
        sound=bool(d["sound"]),
        signature=d.get("signature"),
        message=str(d.get("message", "")),
        model=d.get("model"),
        endpoint=d.get("endpoint"),
        requests=int(d.get("requests") or 0),
        content=d.get("content"),
        completion_tokens=d.get("completion_tokens"),
        seconds=d.get("seconds"),
        checked_at=float(d.get("checked_at") or 0),
        logprobs=d.get("logprobs"),
    )


def checks_path() -> Path:
    """Where the last verdict of each seat is kept (`seats check` and `watch` write it)."""
    return statedir.state_dir() / "seat_checks.json"


def recorded_checks(max_age: float = 86400.0, now: float | None = None) -> dict[str, SeatCheck]:
    """The last verdict per seat (`host:port`) younger than `max_age`; {} when none is readable."""
    now = time.time() if now is None else now
    try:
        items = json.loads(statedir.read_file(checks_path()).decode("utf-8"))
        checks = [check_from_json(d) for d in items]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {c.key: c for c in checks if now - c.checked_at <= max_age}


def record_check(check: SeatCheck) -> None:
    """Keep `check` as its seat's last verdict (atomic replace of the file)."""
    checks = recorded_checks(now=check.checked_at)
    checks[check.key] = check
    path = checks_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps([c.to_json() for c in checks.values()], indent=1), encoding="utf-8")
    os.replace(tmp, path)


async def check_seat(
    link: HostLink, port: int, model: str | None = None, timeout: float = 20.0, max_tokens: int = 8
) -> SeatCheck:
    """Ask the seat on `port` of the link's host for one short completion with logprobs, from
    the host itself (127.0.0.1): the port is never opened to the controller."""
    try:
        ans = await seat_check(
            link,
            {"port": port, "model": model, "timeout": timeout, "max_tokens": max_tokens},
            within=3 * timeout + 15,
            helper=CHECK_HELPER,
        )
    except HelperError as e:
        raise HostError(
            link.name,
            f"seat check failed to run: {e.error.get('message', e.answer)}",
            e.code if e.code == "bad-answer" else "helper",
        ) from None
    return check_from_answer(link.name, port, ans)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _str(v: Any, limit: int = 2000) -> str | None:
    return v[:limit] if isinstance(v, str) else None


def check_from_answer(
    host: str, port: int, ans: Mapping[str, Any], now: float | None = None
) -> SeatCheck:
    """The verdict of the seat-check helper's answer, each field typed (a field of another type
    is left out). `sound` stands only with its witness: an answer that says sound but names no
    completion token or no logprob it judged is `no-witness`, never a pass; one that is neither
    sound nor names what failed is `bad-answer`."""
    tokens, logprobs = _count(ans.get("completion_tokens")), _count(ans.get("logprobs"))
    sound = ans.get("sound") is True
    signature, message = _str(ans.get("signature"), 80), _str(ans.get("message")) or ""
    if sound and not (tokens and logprobs):
        sound, signature = False, "no-witness"
        message = (
            f"the host called the seat sound but named no witness ({tokens or 0} completion tokens, "
            f"{logprobs or 0} logprobs judged): a check over nothing is not a pass"
        )
    elif not sound and signature is None:
        signature = "bad-answer"
        message = f"the seat check answered neither sound nor a failure signature: {message or 'no message'}"
    seconds = ans.get("seconds")
    return SeatCheck(
        host=host,
        port=port,
        sound=sound,
        signature=signature,
        message=message,
        model=_str(ans.get("model"), 300),
        endpoint=_str(ans.get("endpoint"), 100),
        requests=_count(ans.get("requests")) or 0,
        content=_str(ans.get("content"), 300),
        completion_tokens=tokens,
        logprobs=logprobs,
        seconds=float(seconds)
        if isinstance(seconds, int | float) and not isinstance(seconds, bool)
        else None,
        checked_at=time.time() if now is None else now,
    )


__all__ = [
    "Headroom",
    "Seat",
    "SeatCheck",
    "attribute_memory",
    "check_from_answer",
    "check_from_json",
    "check_seat",
    "fetch_seats",
    "headroom",
    "host_seats",
    "record_check",
    "recorded_checks",
    "seat_from_json",
    "seats_for",
    "DEFAULT_HEADROOM_FLOOR_MIB",
]
