"""The Host view's rows: its GPUs with their processes and health, runs, schedules, disks and
processes, each table's rows by key from one host's snapshot (`gpu_rows`, `run_rows`,
`schedule_rows`, `disk_rows`, `process_cells`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from rich.text import Text

from fleetdeck.backend.fleet import schedule_verdict
from fleetdeck.backend.fleet.gpu_health import SLOWDOWN, reason_words, throttle_mark
from fleetdeck.backend.fleet.models import Gpu, HostSnapshot, Process, Schedule
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.cells import bar, progress, temp_style
from fleetdeck.tui.rows.runs import state_style


def gpu_rows(h: HostSnapshot | None, dim: str = "") -> tuple[dict[str, tuple], dict[str, tuple]]:
    """The GPUs table's rows (each card, then its processes) and the health table's (one per
    card), by row key; `dim`: the style of a host that does not answer."""
    gpus: dict[str, tuple] = {}
    health: dict[str, tuple] = {}
    for g in h.gpus if h else ():
        if g.lost is not None:  # none of its figures is known: the driver's words, not 0 of 0
            mem = Text(f"LOST: {shown(g.lost)}", style=dim or "bold red")
        else:
            frac = (
                g.memory_used_mib / g.memory_total_mib
                if g.memory_total_mib and g.memory_used_mib is not None
                else None
            )
            mem = bar(frac, 10, bool(dim))
            used = "?" if g.memory_used_mib is None else f"{g.memory_used_mib:,.0f}"
            total = "?" if g.memory_total_mib is None else f"{g.memory_total_mib:,.0f}"
            mem.append(f" {used}/{total} MiB")
        gpus[f"gpu{g.index}"] = (
            Text(f"GPU {g.index}", style=dim or "bold"),
            Text(shown(g.name) + (" (unified memory)" if g.unified_memory else ""), style=dim),
            mem,
            "-" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%",
            "",
        )
        health[f"gpu{g.index}"] = gpu_health_row(g, dim)
        for p in g.processes:
            gpus[f"gpu{g.index}:{p.pid}"] = (
                Text(f"  pid {p.pid}", style=dim),
                Text(shown(p.user), style=dim),
                Text(f"{p.used_mib:,.0f} MiB", style=dim),
                Text("" if p.sm_pct is None else f"sm {p.sm_pct:.0f}%", style=dim),
                Text(shown(p.command), style=dim),
            )
    return gpus, health


def run_rows(h: HostSnapshot | None, dim: str = "") -> dict[str, tuple]:
    """The runs table's rows, by run key."""
    return {
        r.key: (
            Text(shown(r.name), style=dim),
            Text(r.state, style=dim or state_style(r.state)),
            progress(r.step, r.max_steps),
            "-" if r.loss is None else f"{r.loss:.4f}",
            Text(shown(r.path), style="dim"),
        )
        for r in (h.runs if h else ())
    }


def schedule_rows(
    h: HostSnapshot | None, every: Sequence[Schedule], columns: Sequence[tuple[str, str, int]]
) -> dict[str, tuple]:
    """The schedules table's rows, by schedule id, stray first, in `columns`' order; `every`:
    the fleet's schedules (a duplicate on another host is still one)."""
    rows: dict[str, tuple] = {}
    for s in schedule_verdict.stray_first(h.schedules) if h else ():
        # `why` names the missing path as the host's command gave it: escaped here
        cells = {
            "kind": shown(s.kind),
            "stray": Text(
                shown(schedule_verdict.why(s, every)), style="bold red" if s.stray else "dim"
            ),
            "user": shown(s.user),
            "spec": shown(s.spec),
            "cmd": shown(s.command),
        }
        rows[s.id] = tuple(cells[c[0]] for c in columns)
    return rows


def disk_rows(h: HostSnapshot | None, dim: str = "") -> dict[str, tuple]:
    """The disks table's rows, by path."""
    disks: dict[str, tuple] = {}
    for d in h.disks if h else ():
        frac = d.used_bytes / d.total_bytes if d.total_bytes else None
        used = bar(frac, 10, bool(dim))
        used.append(f" {size_short(d.used_bytes)}/{size_short(d.total_bytes)}")
        disks[d.path] = (
            shown(d.path),
            used,
            size_short(d.free_bytes),
            shown(d.mount),
            shown(d.fstype),
        )
    return disks


def process_key(p: Process) -> str:
    """A process's row key: its pid with its start time, so a reused pid is another row."""
    return f"{p.pid}:{p.start}"


def keys_of(h: HostSnapshot | None) -> set[str]:
    """The row keys of the processes `h` lists."""
    return {process_key(p) for p in h.processes} if h else set()


def held_in_place(
    listed: Iterable[Process],
    shown: Mapping[str, Process],
    order: Sequence[str],
    cursor: str | None,
) -> dict[str, Process]:
    """The process rows to show, by key, in the probe's order; the process under the cursor
    stays, at its place, when it left the listing (it ended, or fell out of the top few), so
    the cursor never lands on a neighbour that moved into its place: it leaves that row only
    when the operator moves it."""
    rows = {process_key(p): p for p in listed}
    if cursor is None or cursor in rows or cursor not in shown:
        return rows
    keys = list(rows)
    at = order.index(cursor) if cursor in order else len(keys)
    keys.insert(min(at, len(keys)), cursor)
    return {k: rows.get(k) or shown[k] for k in keys}


def process_cells(p: Process, dim: str = "", left: bool = False, glyphs: str = "") -> tuple:
    """The cells of one row of the processes table; `left`: the process is not in the latest
    listing (the row is held under the cursor); `glyphs`: its place in the tree, drawn before
    the command."""
    return (
        Text(str(p.pid), style=dim),
        Text(shown(p.user), style=dim),
        "-" if p.cpu_pct is None else f"{p.cpu_pct:.0f}%",
        size_short(p.rss_bytes, "-"),
        "" if not p.gpu_mib else f"{p.gpu_mib:,.0f} MiB",
        Text("not listed now", style="yellow") if left else Text(", ".join(p.why), style="dim"),
        Text.assemble((glyphs, "dim"), (shown(p.command), dim)),
    )


#: what can lose a card first (heat, power, throttling, memory errors, Xids), then the figures
#: a reader looks up (clocks, link, fan, modes): at 120 columns the first six are on screen
HEALTH_COLUMNS = [
    ("gpu", "GPU"),
    ("temp", "Temp/slow"),
    ("power", "Power/limit"),
    ("throttle", "Throttle"),
    ("ecc", "ECC"),
    ("xid", "Xid"),
    ("clocks", "SM/max · mem MHz"),
    ("pcie", "PCIe"),
    ("fan", "Fan"),
    ("modes", "Modes"),
]


def _or(v: object, fmt: str = "{}") -> str:
    return "-" if v is None else fmt.format(v)


def _rate(b: float | None) -> str:
    return "-" if b is None else f"{size_short(int(b))}/s"


def gpu_health_row(g: Gpu, dim: str = "") -> tuple:
    """The Host view's health row of one card (HEALTH_COLUMNS): `-` where the driver does not
    report a figure; the throttle reasons in words; the Xid errors the probe read, `none` when
    it watches and saw none, `-` when it cannot watch."""
    temp = Text(
        f"{_or(g.temperature_c, '{}°')}/{_or(g.temperature_slowdown_c, '{}°')}",
        style=dim or temp_style(g) or "",
    )
    power = f"{_or(g.power_w, '{:.0f}')}/{_or(g.power_limit_w, '{:.0f}')}W"
    clocks = f"{_or(g.sm_clock_mhz)}/{_or(g.sm_clock_max_mhz)} · {_or(g.mem_clock_mhz)}"
    mark = throttle_mark(g)
    throttle = Text(
        reason_words(g.throttle_reasons),
        style=dim or ("" if mark is None else "bold red" if mark in SLOWDOWN else "yellow"),
    )
    p = g.pcie
    link = "-" if p.gen is None and p.width is None else f"gen{_or(p.gen)} x{_or(p.width)}"
    if p.width is not None and p.width_max and p.width < p.width_max:
        link += f" (of x{p.width_max})"
    if p.sampled_at is not None:
        link += f" · tx {_rate(p.tx_bytes_s)} rx {_rate(p.rx_bytes_s)}"
    e = g.ecc
    ecc = "-" if e.mode is None else "on" if e.mode == "enabled" else e.mode
    if e.corrected is not None or e.uncorrected is not None:
        ecc += f" · {_or(e.corrected)} corr / {_or(e.uncorrected)} unc"
    bad = bool(e.uncorrected) or bool(e.pending_retirement) or bool(e.remap_failure)
    if e.pending_retirement:
        ecc += " · remap pending"
    if e.remap_failure:
        ecc += " · remap FAILED"
    modes = (
        " · ".join(
            x
            for x in (
                None
                if g.persistence_mode is None
                else f"persist {'on' if g.persistence_mode else 'off'}",
                None if g.mig_mode is None else f"MIG {'on' if g.mig_mode else 'off'}",
                g.compute_mode,
            )
            if x
        )
        or "-"
    )
    xid = (
        "-"
        if g.xid is None
        else "none"
        if not g.xid
        else ", ".join(
            f"{x.code} at {time.strftime('%H:%M', time.localtime(x.time))}" for x in g.xid[-3:]
        )
    )
    return (
        Text(f"GPU {g.index}", style=dim or "bold"),
        temp,
        Text(power, style=dim),
        throttle,
        Text(ecc, style=dim or ("bold red" if bad else "")),
        Text(xid, style=dim or ("bold red" if g.xid else "")),
        Text(clocks, style=dim),
        Text(link, style=dim),
        Text(_or(g.fan_pct, "{}%"), style=dim),
        Text(modes, style=dim),
    )
