"""The Schedules view: every cron entry, timer, at job and loop; stray ones flagged with why."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from fleetdeck.backend.actions import schedule_ack
from fleetdeck.backend.fleet import schedule_verdict
from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import shorten_unique
from fleetdeck.tui.messages import ActionFinished
from fleetdeck.tui.rows.schedules import (
    FOLDED,
    folded_cells,
    schedule_cells,
    schedule_detail,
    schedule_key,
    short_why,
)
from fleetdeck.tui.views.base import show_text
from fleetdeck.tui.views.table_view import TableView

SCHED_COLUMNS = {
    "flag": " ",
    "host": "Host",
    "kind": "Kind",
    "why": "Stray because",
    "user": "User",
    "spec": "When",
    "cmd": "Command",
}


def sched_layout(width: int, need: dict[str, int] | None = None) -> dict[str, int]:
    """The Schedules table's columns for a terminal `width` wide. The free columns (why it is
    stray, when it runs, the command) share what the others leave, so the table always takes
    the whole width; with `need` (the longest text each free column holds now) each gets what
    it needs first, and what is left goes to the command; below 100 columns kind and user go
    first (the line under the table has both)."""
    if width < 100:
        w = {"flag": 1, "host": 8, "why": 18, "spec": 12}
    else:
        # without `need`: a third of the room past 100 columns to the reason, an eighth to when
        # it runs (a loop's spec is its own command line), the rest to the command
        extra = width - 100
        w = {
            "flag": 1,
            "host": 10,
            "kind": 13,
            "why": 22 + extra // 3,
            "user": 8,
            "spec": 12 + extra // 8,
        }
    n = len(w) + 1
    if need and width >= 100:
        fixed = sum(v for k, v in w.items() if k not in ("why", "spec"))
        room = width - fixed - 2 * n - 2
        mins = {"why": 22, "spec": 12, "cmd": 12}
        wants = {k: max(mins[k], need.get(k, 0)) for k in mins}
        if sum(wants.values()) <= room:
            got = dict(wants, cmd=room - wants["why"] - wants["spec"])
        else:
            # not everything fits: each its minimum, the rest shared as each falls short
            short = {k: wants[k] - mins[k] for k in mins}
            spare = room - sum(mins.values())
            total = sum(short.values()) or 1
            got = {k: mins[k] + spare * short[k] // total for k in mins}
            got["cmd"] = room - got["why"] - got["spec"]
        w["why"], w["spec"] = got["why"], got["spec"]
    w["cmd"] = max(12, width - sum(w.values()) - 2 * n - 2)
    return {k: w[k] for k in SCHED_COLUMNS if k in w}


#: how many schedules (what needs action first: about a screenful) the free columns' widths are
#: measured on; their reasons are kept for the rows, so measuring costs no second `why`
NEED_SAMPLE = 50


class SchedulesScreen(TableView):
    """Schedules across the fleet; a acknowledges, x removes (id typed back)."""

    TABLE_ID = "sched-table"
    COLUMNS = SCHED_COLUMNS

    BINDINGS = [
        Binding(
            "a",
            "acknowledge",
            "Ack",
            tooltip="acknowledge the highlighted schedule (no longer stray for being unknown)",
        ),
        Binding("x", "remove", "Remove", tooltip="remove it: type its id back to confirm"),
        Binding(
            "d",
            "describe",
            "Describe",
            show=False,
            tooltip="describe: the line behind it with its file and line number, a timer's unit, a loop's "
            "command line, escaped (y copies)",
        ),
        Binding(
            "s",
            "toggle_system",
            "System",
            show=False,
            tooltip="show the distribution's own entries one by one (folded into one row per host)",
        ),
    ]

    #: the distribution's own entries (package-owned cron files) shown one by one (`s`)
    show_system = False

    def compose_body(self) -> ComposeResult:
        # the command goes last: it is the long one, and the reasons must stay visible
        yield self.make_table()
        yield Static(id="sched-detail", classes="detail")

    def column_widths(self, width: int, need: dict[str, int] | None) -> dict[str, int]:
        # `need`: the longest text of each free column (`_fit_columns`)
        return sched_layout(width, need)

    @property
    def selected(self) -> Schedule | None:
        """The schedule under the cursor (None on a folded row)."""
        key = self.table.current_key
        if key is None or key.startswith(FOLDED):
            return None
        s = getattr(self, "_by_key", {}).get(key)
        if s is not None:
            return s
        host, sid = key.split("/", 1)
        return self.state.schedule(host, sid)

    def nothing_selected(self) -> str:
        """Why a/x have nothing to act on: no row, or the row that folds the distribution's
        entries (which are never stray: s lists them one by one)."""
        key = self.table.current_key
        if key is not None and key.startswith(FOLDED):
            return "This row folds the entries the distribution installed (never stray): s lists them one by one."
        return "No schedule selected."

    #: the one host shown (`:schedules HOST`), or None for every host
    host_scope: str | None = None

    def scope_host(self, host: str | None) -> None:
        """Show the schedules of `host` alone (None: every host's)."""
        self.host_scope = host
        self.sub_title = f"schedules on {host} only (:schedules shows every host)" if host else None
        self.refresh_view()

    def action_toggle_system(self) -> None:
        """Fold the distribution's entries into one row per host, or list them one by one."""
        self.show_system = not self.show_system
        self.refresh_view()

    def refresh_view(self) -> None:
        # what the view is made from: each host's schedules (a poll brings new but mostly equal
        # ones), the columns and the fold. The same as last time: nothing to redo (comparing
        # 10,000 schedules costs less than ordering them, and leaves the table untouched)
        state = self.state
        made_from = (
            tuple(self._widths.items()),
            self.show_system,
            self.host_scope,
            tuple((n, h.schedules) for n in state.host_names if (h := state.shown(n)) is not None),
        )
        if made_from == getattr(self, "_made_from", None):
            return
        self._fit_columns()
        made_from = (tuple(self._widths.items()), *made_from[1:])
        self._made_from = made_from
        # the order and the keys cover every schedule; a row's cells are made when it is drawn
        # (or filtered, sorted, read): 10,000 schedules, a screenful on screen
        every = fleet = self.state.schedules
        if self.host_scope is not None:
            every = [x for x in every if x.host == self.host_scope]
        index: list[dict] = []  # twins_index(every), built by the first row that needs it
        hosts = shorten_unique(list(dict.fromkeys(x.host for x in every)), self._widths["host"])
        widths = tuple(self._widths)
        # each row's cells by what they are made from, kept from the last listing
        cache: dict[tuple, tuple] = getattr(self, "_row_cache", {})
        self._row_cache: dict[tuple, tuple] = {}
        # below 100 columns the reason gets 18 cells: the sentence would be cut after three words
        narrow = "kind" not in self._widths
        folded: dict[str, int] = {}
        by_key: dict[str, Schedule] = {}
        for s in schedule_verdict.stray_first(every):
            if s.system and not self.show_system:
                folded[s.host] = folded.get(s.host, 0) + 1
                continue
            by_key[schedule_key(s)] = s
        keys = list(by_key)
        keys += [FOLDED + host for host in folded]

        def make(key: str) -> tuple:
            s = by_key.get(key)
            if s is None:
                host = key[len(FOLDED) :]
                return folded_cells(folded[host], hosts[host], self._widths)
            if narrow:
                why = short_why(s)
            else:
                why = self._why(
                    s
                )  # with this listing's twins index (set below, before any row is made)
            # a schedule that did not change keeps its very cell objects: nothing to build, and
            # the table compares them by identity
            ck = (s, why, hosts[s.host], widths)
            row = cache.get(ck)
            if row is None:
                row = schedule_cells(s, why, hosts[s.host], self._widths)
            self._row_cache[ck] = row
            return row

        # the reasons are the fleet's (a duplicate on another host is still one)
        self._by_key, self._every, self._index = by_key, fleet, index
        with self.app.batch_update():
            self.table.sync_lazy(keys, make)
            self.show_detail()

    def _fit_columns(self) -> None:
        """Measure the free columns on what needs action first, and lay the table out for it."""
        every = self.state.schedules
        shown_ones = [
            x
            for x in schedule_verdict.stray_first(every)
            if (self.host_scope is None or x.host == self.host_scope)
            and (self.show_system or not x.system)
        ]
        sample = shown_ones[:NEED_SAMPLE]
        twins = schedule_verdict.twins_index(every) if any(x.stray for x in sample) else None
        # the reasons measured here are the rows' own (same listing, same twins) when no host
        # scope narrows the listing: `_why` takes them from here
        # (each kept with its schedule: an id alone could be a later object's)
        memo = {id(x): (x, schedule_verdict.why(x, every, twins)) for x in sample if x.stray}
        self._why_memo = memo if self.host_scope is None else {}
        need = {
            "why": max(
                (cell_len(shown(memo[id(x)][1])) if x.stray else 12 for x in sample), default=0
            ),
            "spec": max((cell_len(shown(x.spec)) for x in sample), default=0),
            "cmd": max((cell_len(shown(x.command)) for x in sample), default=0),
        }
        if not self.show_system and any(x.system for x in every):
            # the folded rows' own words
            need["why"] = max(need["why"], len("installed by the distribution"))
            need["cmd"] = max(
                need["cmd"], len("99 entries the distribution installed (s lists them)")
            )
        self._need = need
        self.relayout(self.size.width or self.app.size.width)

    def show_detail(self) -> None:
        """Everything about the highlighted schedule, including where it is defined."""
        s = self.selected
        d = self.query_one("#sched-detail", Static)
        key = self.table.current_key
        if s is None and key is not None and key.startswith(FOLDED):
            show_text(
                d,
                Text(
                    f"The entries the distribution installed on {key[len(FOLDED) :]} (package-owned cron "
                    "files): never stray. s lists them one by one.",
                    style="dim",
                ),
            )
            return
        if s is None:
            if (none := self.filtered_out("row")) is not None:
                show_text(d, none)
            elif self.host_scope is not None:
                show_text(
                    d,
                    Text(
                        f"No schedules found on {self.host_scope} (:schedules shows every host).",
                        style="dim",
                    ),
                )
            else:
                show_text(d, Text("No schedules found on any reachable host.", style="dim"))
            return
        show_text(d, schedule_detail(s, self._why(s) if s.stray else None))

    def _why(self, s: Schedule) -> str:
        """`schedule_verdict.why` for a row or the detail line, with the listing's twins index (built
        once per poll, not once per key press)."""
        known = getattr(self, "_why_memo", {}).get(id(s))
        if known is not None and known[0] is s:
            return known[1]
        every, index = getattr(self, "_every", None), getattr(self, "_index", None)
        if every is None or index is None:
            return schedule_verdict.why(s, self.state.schedules)
        if not index:
            index.append(schedule_verdict.twins_index(every))
        return schedule_verdict.why(s, every, index[0])

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def on_keyed_table_choice_changed(self) -> None:
        self.show_detail()  # a filter that lets no row through moves no cursor

    def action_describe(self) -> None:
        """The raw source behind the highlighted schedule."""
        s = self.selected
        if s is None:
            self.notify(self.nothing_selected(), severity="warning", markup=False)
            return
        from fleetdeck.tui.modals.describe import describe_schedule

        self.app.push_screen(describe_schedule(self.app, s))

    def action_acknowledge(self) -> None:
        """Mark the highlighted schedule as known to the operator."""
        s = self.selected
        if s is None:
            self.notify(self.nothing_selected(), severity="warning", markup=False)
            return
        try:
            schedule_ack.acknowledge(on_host=[(s.host, s.id)], via="dashboard")
        except OSError as e:
            self.app.report_error("Acknowledge", e)
            return
        self.app.post_message(
            ActionFinished("acknowledge", s.host, True, f"{shown(s.id)} on {s.host} acknowledged.")
        )

    def action_remove(self) -> None:
        """Remove the highlighted schedule or stop the loop, after its id is typed back."""
        s = self.selected
        if s is None:
            self.notify(self.nothing_selected(), severity="warning", markup=False)
            return
        from fleetdeck.tui.modals.remove import RemoveScheduleModal

        self.app.push_screen(RemoveScheduleModal(s))
