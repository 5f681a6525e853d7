"""The Fleet table's rows: one host's cells (`host_cells`) and height (`host_height`), made from
the fleet state, and the line under the table on the highlighted host (`host_detail`)."""

from __future__ import annotations

import functools
import time

from rich.text import Text

from fleetdeck.backend.fleet.gpu_health import SLOWDOWN, reason_words, throttle_mark, xid_meaning
from fleetdeck.backend.fleet.models import HostSnapshot, Run
from fleetdeck.backend.fleet.run_order import ordered_runs
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short, size_short
from fleetdeck.show.cells import TextBuilder, folded, gpu_health_parts, middle
from fleetdeck.show.fmt import said, shorten_unique
from fleetdeck.tui.fleet_state import FleetState

LIVE = ("running", "stalled")

#: the table's columns, by key: their headers
COLUMNS = {
    "host": "Host",
    "status": "Status",
    "lat": "Lat",
    "gpus": "GPU memory · history",
    "disks": "Disks",
    "runs": "Live runs",
    "stray": "Stray",
}


#: the status cell's headline for a host that did not answer, by the backend's error code: a
#: refused login or a bad key is something to fix here, not an outage to wait out
HEADLINES = {
    "auth": "LOGIN REFUSED",
    "key-file": "KEY FILE",
    "host-key-unknown": "UNKNOWN KEY",
    "host-key-changed": "KEY CHANGED",
    "host-key": "HOST KEY",
    "sudo-missing": "NO SUDO",
}
#: the few words under it (the line under the table has the whole sentence)
REASONS = {
    "timeout": "timed out",
    "disconnected": "disconnected",
    "auth": "fix the login",
    "key-file": "fix client_keys",
    "host-key-unknown": "not in known_hosts",
    "host-key-changed": "refused",
    "host-key": "unreadable",
    "sudo-missing": "install sudo",
    "sudo-password": "sudo asks a password",
    "answer-too-deep": "answer too deep",
    "bad-answer": "malformed answer",
}


def down_words(live: HostSnapshot) -> tuple[str, str]:
    """(headline, a few words of why) for a host that did not answer. `cannot connect to
    ADDR: connection refused` gives `connection refused`: the cause, not the address, is
    what fits in the cell."""
    code, error = live.error_code, said(live.error or "no answer")
    reason = REASONS.get(code or "")
    if reason is None:
        head, sep, tail = error.rpartition(": ")
        reason = tail if sep and head.startswith("cannot connect to") else error
        if reason.startswith("connection "):
            reason = (
                "conn. " + reason[len("connection ") :]
            )  # `conn. refused` fits the 80-column cell
    return HEADLINES.get(code or "", "DOWN"), reason


def latency_text(ms: float) -> str:
    """`41ms`, or `11.5s` from 10 s on: five characters, never cut to a smaller-looking number."""
    return (
        f"{ms:.0f}ms" if ms < 1000 else f"{ms / 1000:.1f}s" if ms < 100_000 else f"{ms / 1000:.0f}s"
    )


def host_cells(
    state: FleetState, name: str, w: dict[str, int], label: str | None = None
) -> tuple[tuple, int]:
    """The fleet-table cells of host `name` for the columns in `w` (in `COLUMNS` order) and the
    row's height (one line per GPU/disk/run). `label`: the name as shown (shortened)."""
    live = state.hosts.get(name)
    snap = state.shown(name)
    down = live is not None and not live.reachable
    dim = down
    status_t = status_text(state, name, w)
    ms = state.latency_ms(name)  # held a second: not redrawn at each half-second poll
    lat = "-" if not live or ms is None or down else latency_text(ms)
    gpus, n_gpus = gpu_lines(state, snap, w["gpus"], dim)
    disks, n_disks = disk_lines(snap, w["disks"], dim) if "disks" in w else (None, 0)
    runs, n_runs = run_lines(snap, w["runs"], dim)
    label = folded(label or name, w["host"])  # a host's name whole, wrapped in its column
    height = max(1, n_gpus, n_disks, n_runs, status_t.plain.count("\n") + 1, label.count("\n") + 1)
    cells = {
        "host": Text(label, style="bold" if not dim else "dim"),
        "status": status_t,
        "lat": Text(lat),
        "gpus": gpus,
        "disks": disks,
        "runs": runs,
        "stray": stray_text(snap, down),
    }
    return tuple(cells[k] for k in COLUMNS if k in w), height


def status_text(state: FleetState, name: str, w: dict[str, int]) -> Text:
    """Host `name`'s Status cell: up, waiting, or down with why and for how long; STALE and its
    age; below 100 columns its disks under it."""
    live = state.hosts.get(name)
    snap = state.shown(name)
    down = live is not None and not live.reachable
    status = TextBuilder()
    if live is None:
        status.add("… waiting", "dim")
    elif down:
        since = state.down_since.get(name)
        headline, reason = down_words(live)
        status.add(f"✖ {headline}", "bold red")
        if since is not None:
            # never seen up: the outage began before the dashboard did, so only a lower bound
            bound = "" if name in state.last_good else "≥"
            status.add(f" {bound}{duration_short(state.clock() - since)}", "red")
        status.add("\n" + reason, "red")
    else:
        status.add("● up", "bold green")
    if state.is_stale(name) and not down:  # a down host says how long already
        status.add("\n")
        status.add(f"STALE {duration_short(state.age(name))}", "reverse yellow")
    if "disks" not in w and snap is not None and not down and snap.disks:
        _add_disks(status, snap, w["status"], 1, down, first=False)  # under the status
    return status.build()


def stray_text(snap: HostSnapshot | None, down: bool) -> Text:
    """The Stray cell: how many of the host's schedules are strays; `-` when not known."""
    if snap is None or down:  # unknown stays unknown: a host that does not answer has no count
        return Text("-", style="dim")
    n = sum(1 for s in snap.schedules if s.stray)
    return Text(str(n), style="bold red" if n else "dim")


def host_height(state: FleetState, name: str, w: dict[str, int]) -> int:
    """How many lines host `name`'s row takes (what `host_cells` makes), without making its
    cells: the table is laid out with every row's height, and fills only the rows it draws."""
    live = state.hosts.get(name)
    snap = state.shown(name)
    down = live is not None and not live.reachable
    stale = not down and state.is_stale(name)
    # a poll brings new snapshots of the same shape: the height is worked out once per shape
    return _height(
        name,
        w["host"],
        w["runs"],
        "disks" in w,
        live is None,
        down,
        stale,
        None
        if snap is None
        else (len(snap.gpus), len(snap.disks), tuple((r.name, r.state) for r in snap.runs)),
    )


@functools.lru_cache(maxsize=4096)
def _height(
    name: str,
    host_w: int,
    runs_w: int,
    disk_column: bool,
    unseen: bool,
    down: bool,
    stale: bool,
    shape: tuple[int, int, tuple[tuple[str, str], ...]] | None,
) -> int:
    """`host_height` from what it depends on: the host's name, the columns' widths, whether the
    host was seen, is down or stale, and its GPU and disk counts and runs (name, state)."""
    name_lines = folded(name, host_w).count("\n") + 1
    status = 1 if unseen else 2 if down else 1
    if stale:
        status += 1
    if shape is None:
        return max(status, name_lines)
    gpus, n_disks, runs = shape
    disks = n_disks if disk_column else 0
    if not disk_column and not down:  # below 100 columns the disks go under the status
        status += n_disks
    _, name_w, stalled_w = _run_widths(runs_w)
    # each live run's name whole, in the lines it takes (as `_run_names`), one more for a failure
    run_lines = sum(
        folded(shown(r), stalled_w if state == "stalled" else name_w).count("\n") + 1
        for r, state in runs
        if state in LIVE
    ) + any(state == "failed" for _, state in runs)
    return max(1, gpus, disks, run_lines, status, name_lines)


def gpu_lines(state: FleetState, h: HostSnapshot | None, width: int, dim: bool) -> tuple[Text, int]:
    """The GPU memory cell: one line per card (bar, figures, health, sparkline)."""
    if h is None or not h.gpus:
        return Text("-", style="dim"), 0
    t = TextBuilder()
    for i, g in enumerate(h.gpus):
        if i:
            t.add("\n")
        if g.lost is not None:  # no figure of it is known: say what the driver said, not 0 of 0
            t.add(f"{g.index} ", "dim" if dim else "bold")
            t.add(f"LOST: {shown(g.lost)}"[: max(8, width - 2)], "dim" if dim else "bold red")
            continue
        used, total = g.memory_used_mib, g.memory_total_mib
        frac = used / total if total and used is not None else None
        t.add(f"{g.index}{'U' if g.unified_memory else ' '}", "dim" if dim else "bold")
        t.bar(frac, 6, dim)
        t.add(
            f" {'  ?' if used is None else f'{used / 1024:>3.0f}'}/"
            f"{'?' if total is None else f'{total / 1024:.0f}'}G ",
            "dim" if dim else None,
        )
        # temperature, power and a throttle mark take the room the sparkline leaves (cells.py)
        health, spark_w = gpu_health_parts(g, max(4, width - 19))
        for text, style in health:
            t.add(text, "dim" if dim else style)
        if spark_w:
            t.spark(state.spark.get((h.name, g.index), ()), spark_w, dim)
    return t.build(), len(h.gpus)


def gpu_health_lines(h: HostSnapshot) -> list[tuple[str, str]]:
    """The sentences under the table for a host's throttled cards and recent Xid errors: the
    Fleet row has room for a mark, this line for the reason in words."""
    out = []
    for g in h.gpus:
        mark = throttle_mark(g)
        if mark is not None:
            out.append(
                (
                    f"▼ GPU{g.index} throttled: {reason_words(g.throttle_reasons)}",
                    "bold red" if mark in SLOWDOWN else "yellow",
                )
            )
        for x in (g.xid or ())[-2:]:
            out.append(
                (
                    f"✖ GPU{g.index} Xid {x.code} at {time.strftime('%H:%M:%S', time.localtime(x.time))}: "
                    f"{xid_meaning(x.code)}",
                    "bold red",
                )
            )
    return out


def disk_lines(h: HostSnapshot | None, width: int, dim: bool) -> tuple[Text, int]:
    """The Disks cell: one line per disk (`███ 91% /srv/…/h1/runs`), `-` when none."""
    if h is None or not h.disks:
        return Text("-", style="dim"), 0
    t = TextBuilder()
    _add_disks(t, h, width, 3 if width < 28 else 8, dim, first=True)
    return t.build(), len(h.disks)


def _add_disks(
    t: TextBuilder, h: HostSnapshot, width: int, bar_w: int, dim: bool, first: bool
) -> None:
    """Write one line per disk of `h` into `t` (each after a newline, but for the `first`): a
    `bar_w`-cell bar, how full, and its path within `width`. Below 100 columns the disks go
    under the host's status this way, a one-cell bar each."""
    # a path too long keeps its head and its tail (`/srv/…/h1/runs`): the head says which
    # mount, the tail which folder; the Host view has each in full
    room = max(4, width - bar_w - 6)
    paths = {shown(d.path): middle(shown(d.path), room) for d in h.disks}
    if len(set(paths.values())) < len(paths):  # two alike once cut: cut where they differ
        paths = shorten_unique(list(paths), room)
    for i, d in enumerate(h.disks):
        if i or not first:
            t.add("\n")
        if d.error or not d.total_bytes:
            t.add(f"? {shown(d.path)}", "dim" if dim else "yellow")
            continue
        frac = d.used_bytes / d.total_bytes
        t.bar(frac, bar_w, dim)
        t.add(f"{frac:>4.0%} {paths[shown(d.path)]}", "dim" if dim else None)


def _run_widths(width: int) -> tuple[bool, int, int]:
    """(wide, the width of a running run's name, a stalled one's) in a Live runs cell."""
    wide = width >= 30
    # a stalled run's line says so in words where the others have their progress bar
    return wide, max(3, width - 6 - (10 if wide else 0)), max(3, width - 9 - (5 if wide else 0))


def _run_names(live: list[Run], width: int) -> list[list[str]]:
    """Each live run's name whole, in the lines it takes in a Live runs cell `width` wide."""
    _, name_w, stalled_w = _run_widths(width)
    return [
        folded(shown(r.name), stalled_w if r.state == "stalled" else name_w).split("\n")
        for r in live
    ]


def run_lines(h: HostSnapshot | None, width: int, dim: bool) -> tuple[Text, int]:
    """One line per live run (`▶run-7  45% ████`, a stalled one `‖run-9 stalled`; a name too
    long for one wraps whole over more), then the count of failed runs (`✖ 2 failed`, as
    `status` says it); `-` when there is neither."""
    live = ordered_runs(r for r in h.runs if r.state in LIVE) if h else []
    failed = sum(1 for r in h.runs if r.state == "failed") if h else 0
    if not live and not failed:
        return Text("-", style="dim"), 0
    t = TextBuilder()
    wide, name_w, _ = _run_widths(width)
    names = _run_names(live, width)
    n = 0
    for r, lines in zip(live, names, strict=True):
        if n:
            t.add("\n")
        n += len(lines)
        stalled = r.state == "stalled"
        t.add("‖" if stalled else "▶", "dim" if dim else "bold yellow" if stalled else "green")
        for line in lines[:-1]:  # a long name's first lines, under its mark
            t.add(line + "\n ", "dim" if dim else None)
        pct = f"{r.step / r.max_steps:.0%}" if r.step is not None and r.max_steps else "?"
        if stalled:
            t.add(lines[-1], "dim" if dim else None)
            t.add(" stalled", "dim" if dim else "bold yellow")
            if wide:
                t.add(f" {pct:>4}", "dim" if dim else None)
            continue
        t.add(f"{lines[-1]:<{name_w}} {pct:>4}", "dim" if dim else None)
        if wide and r.step is not None and r.max_steps:
            t.add(" ")
            t.bar(r.step / r.max_steps, 8, dim)
    if failed:
        if live:
            t.add("\n")
        t.add(f"✖ {failed} failed", "dim" if dim else "red")
        n += 1
    return t.build(), n


def host_detail(state: FleetState, name: str | None) -> Text:
    """One or two sentences on the highlighted host: why it is down, how old its figures are."""
    if name is None:
        return Text("no hosts in the fleet file", style="dim")
    live, good = state.hosts.get(name), state.last_good.get(name)
    t = Text()
    t.append(name, style="bold")
    if live is None:
        t.append(": not polled yet.")
        return t
    if not live.reachable:
        since = state.down_since.get(name)
        t.append(
            " is DOWN"
            if down_words(live)[0] == "DOWN"
            else f" is DOWN ({down_words(live)[0].lower()})",
            style="bold red",
        )
        if since is not None and good:
            t.append(
                f" since {time.strftime('%H:%M:%S', time.localtime(since))}"
                f" ({duration_short(state.clock() - since)})"
            )
        elif since is not None:
            t.append(
                f" (no answer since the dashboard started, {duration_short(state.clock() - since)} ago)"
            )
        t.append(f": {said(live.error or 'no answer')}.")
        if good:
            t.append(
                f" Greyed figures are the last good ones, {duration_short(state.age(name))} old.",
                style="dim",
            )
        return t
    mem = (
        f", memory {size_short(live.memory_used_bytes)}/{size_short(live.memory_total_bytes)}"
        if live.memory_total_bytes
        else ""
    )
    load = f", load {live.load1:.2f}" if live.load1 is not None else ""
    t.append(f" up{load}{mem}, last answer {duration_short(state.age(name))} ago.")
    if any(g.unified_memory for g in live.gpus):
        t.append(" U = unified memory: GPU figures are the system's.", style="dim")
    if state.is_stale(name):
        t.append(" STALE: older than two poll intervals.", style="bold yellow")
    for w in live.warnings[:2]:
        t.append(f"\n⚠ {said(w)}", style="yellow")
    for line, style in gpu_health_lines(live):
        t.append("\n" + line, style=style)
    for d in live.disks:
        if d.error or not d.total_bytes:
            t.append(
                f"\n? {shown(d.path)}: {shown(d.error) if d.error else 'no size reported'}",
                style="yellow",
            )
    return t
