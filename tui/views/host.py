"""The Host view: GPUs with their processes, runs, schedules and disks of one host (the rows:
`tui/rows/host.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from fleetdeck.backend.fleet.models import Process
from fleetdeck.tui.modals.describe import describe_process, describe_run, describe_schedule
from fleetdeck.tui.modals.holders import HoldersModal
from fleetdeck.tui.modals.stop import StopProcessModal
from fleetdeck.tui.rows.fleet import host_detail
from fleetdeck.tui.rows.host import (
    HEALTH_COLUMNS,
    disk_rows,
    gpu_rows,
    held_in_place,
    keys_of,
    process_cells,
    process_key,
    run_rows,
    schedule_rows,
)
from fleetdeck.tui.views.base import ViewScreen, show_text
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

    def refresh_clock(self) -> None:
        """The summary line alone (its ages and down-for move with the clock; the tables only
        with a poll): the same line is not drawn again."""
        show_text(self.query_one("#host-summary", Static), host_detail(self.state, self.host_name))

    def refresh_view(self) -> None:
        st = self.state
        self.refresh_clock()
        h = st.shown(self.host_name)
        dim = (
            "dim"
            if (live := st.hosts.get(self.host_name)) is not None and not live.reachable
            else ""
        )
        gpus, health = gpu_rows(h, dim)
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
                ("#host-runs", run_rows(h, dim)),
                ("#host-schedules", schedule_rows(h, st.schedules, self._sched_cols)),
                ("#host-disks", disk_rows(h, dim)),
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
