"""The Host view: GPUs with their processes, runs, schedules and disks of one host."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from fleetdeck.backend.fleet import schedule_verdict
from fleetdeck.backend.fleet.gpu_health import SLOWDOWN, reason_words, throttle_mark
from fleetdeck.backend.fleet.models import Gpu, HostSnapshot, Process
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.cells import bar, progress, temp_style
from fleetdeck.show.fmt import human_bytes, human_duration
from fleetdeck.tui.modals.describe import describe_process, describe_run, describe_schedule
from fleetdeck.tui.modals.holders import HoldersModal
from fleetdeck.tui.modals.stop import StopProcessModal
from fleetdeck.tui.views.base import ViewScreen
from fleetdeck.tui.views.fleet import host_detail
from fleetdeck.tui.views.proc_tree import tree_order
from fleetdeck.tui.widgets.keyed_table import KeyedTable


class HostScreen(ViewScreen):
    """Everything one host holds; esc goes back to the fleet."""

    SHOWS_AGES = True
    BINDINGS = [
        Binding("escape", "app.back", "Back", tooltip="back to the Fleet view"),
        Binding(
            "K",
            "stop_process",
            "Stop process",
            show=False,
            tooltip="stop or signal the highlighted process: TERM, INT, HUP, STOP, CONT or KILL "
            "(its pid and program typed back; audited)",
        ),
        Binding(
            "e,f5",
            "toggle_tree",
            "Tree",
            show=False,
            tooltip="processes as a tree (each under its parent, a trainer's workers under it), "
            "or by the probe's order again",
        ),
        Binding(
            "w",
            "who_holds",
            "Who holds",
            show=False,
            tooltip="who holds a path: the processes with a file under it open, mapped or as cwd "
            "(starts at the highlighted run's folder)",
        ),
        Binding(
            "d",
            "describe",
            "Describe",
            show=False,
            tooltip="describe the highlighted process, run or schedule: the raw source behind the "
            "row (a process's whole command line read from the host)",
        ),
    ]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.host_name = name
        #: the processes the table shows, by row key (a process that left the listing while
        #: the cursor was on it stays here, and on screen, until the cursor leaves it)
        self._procs_shown: dict[str, Process] = {}
        #: the processes table as a tree (each under its parent) rather than in the probe's order
        self.process_tree = False

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="host-body", can_focus=False):
            yield Static(id="host-summary", classes="detail")
            yield Label("GPUs and their processes", classes="section")
            yield KeyedTable(
                [
                    ("what", "GPU / pid"),
                    ("name", "Name / user"),
                    ("mem", "Memory"),
                    ("util", "Util"),
                    ("cmd", "Command"),
                ],
                id="host-gpus",
                classes="auto",
            )
            yield Label(
                "GPU health (null figures: the driver does not report them)", classes="section"
            )
            yield KeyedTable(HEALTH_COLUMNS, id="host-gpu-health", classes="auto")
            yield Label("Runs", classes="section")
            yield KeyedTable(
                [
                    ("name", "Run"),
                    ("state", "State"),
                    ("prog", "Progress"),
                    ("loss", "Loss"),
                    ("path", "Path"),
                ],
                id="host-runs",
                classes="auto",
            )
            yield Label("Schedules", classes="section")
            self._sched_cols = host_schedule_columns(self.app.size.width)
            yield KeyedTable(self._sched_cols, id="host-schedules", classes="auto")
            yield Label("Disks", classes="section")
            yield KeyedTable(
                [
                    ("path", "Root"),
                    ("bar", "Used"),
                    ("free", "Free"),
                    ("mount", "Mount"),
                    ("fs", "Type"),
                ],
                id="host-disks",
                classes="auto",
            )
            yield Label(PROCS_LABEL, classes="section", id="host-procs-label")
            yield KeyedTable(
                [
                    ("pid", "Pid"),
                    ("user", "User"),
                    ("cpu", "CPU"),
                    ("rss", "RSS"),
                    ("gpu", "GPU"),
                    ("why", "Why"),
                    ("cmd", "Command"),
                ],
                id="host-procs",
                classes="auto",
            )

    def on_resize(self) -> None:
        cols = host_schedule_columns(self.size.width)
        if cols != self._sched_cols:
            self._sched_cols = cols
            self.query_one("#host-schedules", KeyedTable).set_columns(cols)
            self.refresh_view()

    def on_mount(self) -> None:
        self.sub_title = f"host {self.host_name}"
        self.refresh_view()

    def refresh_view(self) -> None:
        st = self.state
        self.query_one("#host-summary", Static).update(host_detail(st, self.host_name))
        h = st.shown(self.host_name)
        dim = (
            "dim"
            if (live := st.hosts.get(self.host_name)) is not None and not live.reachable
            else ""
        )
        gpus: dict[str, tuple] = {}
        health: dict[str, tuple] = {}
        runs: dict[str, tuple] = {}
        scheds: dict[str, tuple] = {}
        disks: dict[str, tuple] = {}
        for g in h.gpus if h else ():
            if g.lost is not None:  # none of its figures is known: the driver's words, not 0 of 0
                mem = Text(f"LOST: {shown(g.lost)}", style=dim or "bold red")
            else:
                frac = g.memory_used_mib / g.memory_total_mib if g.memory_total_mib else None
                mem = bar(frac, 10, bool(dim))
                mem.append(f" {g.memory_used_mib:,.0f}/{g.memory_total_mib:,.0f} MiB")
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
        for r in h.runs if h else ():
            runs[r.key] = (
                Text(shown(r.name), style=dim),
                Text(r.state, style=dim or _state_style(r.state)),
                progress(r.step, r.max_steps),
                "-" if r.loss is None else f"{r.loss:.4f}",
                Text(shown(r.path), style="dim"),
            )
        every = st.schedules
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
            scheds[s.id] = tuple(cells[c[0]] for c in self._sched_cols)
        for d in h.disks if h else ():
            frac = d.used_bytes / d.total_bytes if d.total_bytes else None
            used = bar(frac, 10, bool(dim))
            used.append(f" {human_bytes(d.used_bytes)}/{human_bytes(d.total_bytes)}")
            disks[d.path] = (
                shown(d.path),
                used,
                human_bytes(d.free_bytes),
                shown(d.mount),
                shown(d.fstype),
            )
        table = self.query_one("#host-procs", KeyedTable)
        cursor = table.current_key
        order: Sequence[Process] = h.processes if h else ()
        glyphs: dict[str, str] = {}
        if self.process_tree:
            ordered = tree_order(order)
            order = [p for p, _ in ordered]
            glyphs = {process_key(p): g for p, g in ordered}
        listed = held_in_place(order, self._procs_shown, table.keys, cursor)
        self._procs_shown = listed
        now = keys_of(h)
        procs = {
            k: process_cells(p, dim, left=k not in now, glyphs=glyphs.get(k, ""))
            for k, p in listed.items()
        }
        with self.app.batch_update():
            for tid, rows in (
                ("#host-gpus", gpus),
                ("#host-gpu-health", health),
                ("#host-runs", runs),
                ("#host-schedules", scheds),
                ("#host-disks", disks),
                ("#host-procs", procs),
            ):
                # the table keeps the cursor on its row key (pid and start time) as rows above it
                # come or go (KeyedTable._sync), so it stays on its process, not on its place
                self.query_one(tid, KeyedTable).sync(rows)

    def action_stop_process(self) -> None:
        """Stop the process highlighted in the processes table, once typed back."""
        h = self.state.hosts.get(self.host_name)
        key = self.query_one("#host-procs", KeyedTable).current_key
        proc = (
            self._procs_shown.get(key)
            if key is not None and h is not None and h.reachable
            else None
        )
        if proc is None:
            self.notify(
                "Highlight a process in the processes table first (the host must be up).",
                severity="warning",
                markup=False,
            )
            return
        self.app.push_screen(StopProcessModal(self.host_name, proc, listed=key in keys_of(h)))

    def action_toggle_tree(self) -> None:
        """Show the processes as a tree, or in the probe's order again; the cursor stays on its
        process."""
        self.process_tree = not self.process_tree
        self.query_one("#host-procs-label", Label).update(
            PROCS_TREE_LABEL if self.process_tree else PROCS_LABEL
        )
        self.refresh_view()

    def action_describe(self) -> None:
        """`d`: the raw source behind the highlighted row of the focused table (describe.py)."""
        h = self.state.shown(self.host_name)
        focused = self.app.focused
        which = focused.id if isinstance(focused, KeyedTable) else None
        key = focused.current_key if isinstance(focused, KeyedTable) else None
        if which == "host-runs":
            run = next((r for r in (h.runs if h else ()) if r.key == key), None)
            if run is not None:
                self.app.push_screen(describe_run(self.app, run))
                return
        elif which == "host-schedules":
            sched = next((s for s in (h.schedules if h else ()) if s.id == key), None)
            if sched is not None:
                self.app.push_screen(describe_schedule(self.app, sched))
                return
        elif which == "host-procs" and key in self._procs_shown:
            self.app.push_screen(describe_process(self.app, self.host_name, self._procs_shown[key]))
            return
        self.notify(
            "Highlight a process, a run or a schedule first (tab moves between the tables).",
            severity="warning",
            markup=False,
        )

    def action_who_holds(self) -> None:
        """Ask the host which processes hold a file under a path (the highlighted run's, to start)."""
        h = self.state.shown(self.host_name)
        key = self.query_one("#host-runs", KeyedTable).current_key
        run = next((r for r in (h.runs if h else ()) if r.key == key), None)
        self.app.push_screen(HoldersModal(self.host_name, run.path if run else ""))


PROCS_LABEL = "Processes that matter (K stop or signal · e tree · w who holds a path)"
PROCS_TREE_LABEL = "Processes that matter, as a tree (K stop or signal · e flat · w who holds)"


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
        human_bytes(p.rss_bytes, "-"),
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
    return "-" if b is None else f"{human_bytes(int(b))}/s"


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


def host_schedule_columns(width: int) -> list[tuple[str, str, int]]:
    """The Host view's schedule columns: the reason gets a bounded share and the command what
    is left (a reason naming a path and two hosts would otherwise push the command off screen);
    below 120 columns the user goes (the Schedules view shows it)."""
    w = {"kind": 13, "stray": min(48, max(18, width // 4)), "user": 8, "spec": 14}
    if width < 120:
        del w["user"]
    if width < 100:
        w["kind"], w["spec"] = 9, 12
    w["cmd"] = max(16, width - sum(w.values()) - 2 * (len(w) + 1) - 4)
    labels = {
        "kind": "Kind",
        "stray": "Stray because",
        "user": "User",
        "spec": "When",
        "cmd": "Command",
    }
    return [(k, labels[k], w[k]) for k in labels if k in w]


def _state_style(state: str) -> str:
    return {
        "running": "green",
        "stalled": "bold yellow",
        "failed": "bold red",
        "finished": "blue",
    }.get(state, "")


def eta_text(seconds: float | None) -> str:
    """ETA for the tables: a duration or '-'."""
    return "-" if seconds is None else human_duration(seconds)
