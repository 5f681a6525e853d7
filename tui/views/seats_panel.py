"""The seats part of the Alerts view: a seat's Last check cell, why a host's seats have no
headroom bar, and a card's headroom bar with every seat's share."""

from __future__ import annotations

import time

from rich.text import Text

from fleetdeck.backend.fleet.models import HostSnapshot
from fleetdeck.backend.fleet.seat_model import Seat
from fleetdeck.backend.monitor.seats import SeatCheck, headroom, host_seats
from fleetdeck.show.fmt import host_text, human_mib, shown

SHARE_STYLES = ("cyan", "magenta", "yellow", "blue", "green")
BAR = 40


def verdict_text(c: SeatCheck | None, checking: bool = False) -> Text:
    """A seat's Last check cell: `checking…`, `-` (never checked), `sound · 8 tok` (with the
    tokens it rests on) or the failure signature."""
    if checking:
        return Text("checking…", style="yellow")
    if c is None:
        return Text("-", style="dim")
    if c.sound:
        return Text(f"sound · {c.completion_tokens or 0} tok", style="green")
    return host_text(str(c.signature), "bold red")


def seat_sections(seat: Seat, check: SeatCheck | None) -> list[tuple[str, str]]:
    """What the dashboard holds of a seat, for its Describe pop-up (`d`): the command line and
    its flags as the probe saw them, the endpoint a check asks, the last check's verdict in
    full. Every byte the host sent is escaped (`shown`)."""
    flags = "\n".join(f"{shown(k)} {shown(v)}" for k, v in sorted(seat.flags.items()))
    where = (
        f"http://127.0.0.1:{seat.port}"
        if seat.port
        else "none: the probe found no port it listens on"
    )
    endpoint = [f"{where} (asked from {seat.host} itself: seats check, c in the Alerts view)"]
    if seat.container:
        endpoint.append(
            f"container {shown(str(seat.container.get('name') or '?'))}, "
            f"image {shown(str(seat.container.get('image') or '?'))}"
        )
    out = [
        (
            "the command line, as the probe saw it (its first 300 characters)",
            shown(seat.command) or "(none)",
        ),
        ("the flags that size its memory and context", flags or "(none of them set)"),
        ("the endpoint", "\n".join(endpoint)),
        ("the last check", check_words(check)),
    ]
    return out


def check_words(c: SeatCheck | None) -> str:
    """A seat check's verdict in full, one fact a line (escaped)."""
    if c is None:
        return "never checked (c checks it)"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c.checked_at)) if c.checked_at else "?"
    lines = [
        f"{'sound' if c.sound else 'FAILED ' + shown(str(c.signature))} at {when}",
        f"message: {shown(c.message)}",
        f"endpoint: {shown(c.endpoint) if c.endpoint else '-'}",
        f"model: {shown(c.model) if c.model else '-'}",
        f"witness: {c.witness}; {c.requests} request{'' if c.requests == 1 else 's'}"
        + (f" in {c.seconds:.2f}s" if c.seconds is not None else ""),
    ]
    if c.content:
        lines.append(f"completion: {shown(c.content)}")
    return "\n".join(lines)


def no_bar_text(hosts: list[HostSnapshot]) -> str:
    """Why a host's seats have no headroom bar, one sentence per host ("" when every seat has
    one); "No serving seats seen." only when no host reported a seat."""
    seated = [(h, host_seats(h)) for h in hosts]
    seated = [(h, seats) for h, seats in seated if seats]
    if not seated:
        return "No serving seats seen: no host's probe reported one."
    out = []
    for h, seats in seated:
        bare = [s for s in seats if not s.memory_by_gpu]
        if not bare:
            continue
        n = f"{len(bare)} seat{'' if len(bare) == 1 else 's'} on {h.name}"
        if not h.gpus:
            why = "the host reports no GPU"
        elif all(g.unified_memory for g in h.gpus):
            why = "its memory is unified, so the driver lists no per-process figures"
        elif not any(g.processes for g in h.gpus):
            why = "the driver lists no process on any card (a seat in a container's pid namespace is not listed)"
        else:
            why = (
                "no process the driver lists on a card belongs to a seat's process tree (a seat in a "
                "container's pid namespace is counted in the card's used memory, not listed)"
            )
        out.append(f"{n} hold no memory the cards list, so no headroom bar: {why}.")
    return "\n".join(out)


def headroom_bar(host: HostSnapshot, gpu: int, floor_mib: float = 6 * 1024) -> Text:
    """`host GPUn ███▓▓▓░░ free` with each seat's share in its own colour, other holders grey,
    the free part empty, and the free figure red under the `[alerts]` floor."""
    room = next(r for r in headroom(host) if r.gpu == gpu)
    total = room.total_mib or 1.0
    t = Text(f"{host.name} GPU{gpu} ")
    used_cells = 0
    legend = []
    for i, (name, mib) in enumerate(room.shares):
        cells = round(BAR * mib / total)
        style = SHARE_STYLES[i % len(SHARE_STYLES)]
        t.append("█" * cells, style=style)
        used_cells += cells
        legend.append(Text(f" {shown(name)} {human_mib(mib)}", style=style))
    other = max(0, round(BAR * room.held_mib / total) - used_cells)
    t.append("█" * min(other, BAR - used_cells), style="grey50")
    t.append("░" * max(0, BAR - used_cells - other), style="dim")
    t.append(
        f" {human_mib(room.free_mib)} free of {human_mib(room.total_mib)}",
        style="bold red" if room.free_mib < floor_mib else "",
    )
    for part in legend:
        t.append_text(part)
    return t
