"""The Runs view: every run in the fleet; the selected one's loss curves, checkpoints and log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, Static

from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short
from fleetdeck.show.cells import eval_trend, folded, loss_chart
from fleetdeck.tui.rows.fleet import down_words
from fleetdeck.tui.rows.runs import (
    checkpoint_rows,
    run_cells,
    run_title,
)
from fleetdeck.tui.views import run_actions
from fleetdeck.tui.views.base import show_text
from fleetdeck.tui.views.run_log import LOG_LABEL, LOG_LINES, RunLog
from fleetdeck.tui.views.table_view import TableView
from fleetdeck.tui.widgets.keyed_table import KeyedTable
from fleetdeck.tui.widgets.log_pane import LogPane

RUN_COLUMNS = {
    "host": "Host",
    "name": "Run",
    "state": "State",
    "prog": "Progress",
    "sps": "s/step",
    "eta": "ETA",
    "loss": "Loss",
    "eval": "Eval",
}
#: widths of the columns other than the run's name (its width is what is left)
RUN_WIDTHS = {"host": 10, "state": 10, "prog": 18, "sps": 6, "eta": 6, "loss": 6, "eval": 6}


#: the name column's widest (a longer name is shortened, its end kept unique)
NAME_MAX = 40
#: the host column's widest, and the progress column's (its bar grows to fill it)
HOST_MAX = 24
PROG_MAX = 60


def run_layout(width: int, need: dict[str, int] | None = None) -> dict[str, int]:
    """The Runs table's columns for a terminal `width` wide: below 100 columns s/step and eval
    loss go first (the detail pane shows both); host, name, state and progress always stay.
    With `need` (the widest run name and host name shown), the name column is as wide as the
    widest name (8 to NAME_MAX) and the host column as the widest host (up to HOST_MAX), and
    what they leave goes to the progress column, whose bar grows with it (up to PROG_MAX)."""
    keys = [k for k in RUN_COLUMNS if width >= 100 or k not in ("sps", "eval")]
    w = {k: RUN_WIDTHS[k] for k in keys if k != "name"}
    # two cells of padding per column, the table's scrollbar, and the view's own: on a short
    # terminal the view scrolls too, and without room for both the table scrolled sideways,
    # hiding the last digit of the loss
    room = width - sum(w.values()) - 2 * len(keys) - 4
    if not need:
        w["name"] = max(8, min(NAME_MAX, room))
        return {k: w[k] for k in keys}
    w["name"] = max(8, min(NAME_MAX, need.get("name", 0), room))
    left = room - w["name"]
    grow = max(0, min(HOST_MAX, need.get("host", 0)) - w["host"])
    w["host"] += min(grow, max(0, left))
    left = room - w["name"] - (w["host"] - RUN_WIDTHS["host"])
    w["prog"] += max(0, min(PROG_MAX - w["prog"], left))
    return {k: w[k] for k in keys}


class LossChart(Static):
    """The selected run's loss curves, drawn at render time for the width the chart really has
    (at 80x24 the detail pane's scrollbar takes two columns, and a chart drawn for the screen's
    width wrapped into garbage)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._series: tuple[list, list] = ([], [])

    def show(self, losses: Sequence, evals: Sequence) -> None:
        """Draw these series from now on."""
        series = (list(losses), list(evals))
        if series != self._series:
            self._series = series
            self.refresh(layout=True)

    def on_resize(self) -> None:
        self.refresh()  # drawn again for the new width

    def render(self) -> Text:
        losses, evals = self._series
        if not losses and not evals:
            return Text("")
        # the y labels take 10 columns
        return loss_chart(losses, evals, max(12, self.content_size.width - 10), 8)


class CheckpointTable(KeyedTable):
    """Checkpoints of the selected run; space marks one for purge."""

    BINDINGS = [
        Binding(
            "space",
            "toggle_mark",
            "Mark",
            tooltip="mark / unmark the highlighted checkpoint for purge",
        )
    ]

    def action_toggle_mark(self) -> None:
        """Mark or unmark the highlighted checkpoint."""
        if isinstance(screen := self.screen, RunsScreen):  # the one screen that holds it
            screen.toggle_mark(self.current_key)


class RunsScreen(RunLog, TableView):
    """Runs across the fleet; p purge, m mirror, l reload log."""

    TABLE_ID = "runs-table"
    COLUMNS = RUN_COLUMNS

    BINDINGS = [
        Binding(
            "enter",
            "open_checkpoints",
            "Checkpoints",
            show=False,
            tooltip="move to the run's checkpoints",
        ),
        Binding(
            "p", "purge", "Purge", tooltip="purge the marked checkpoints (or the highlighted one)"
        ),
        Binding(
            "m",
            "mirror",
            "Mirror",
            tooltip="mirror the run's adapter to another host and verify it",
        ),
        Binding("l", "reload_log", "Log", show=False, tooltip="reload the tail of train.log"),
        Binding(
            "f",
            "follow_log",
            "Follow",
            show=False,
            tooltip="follow train.log live, as tail -f (f again stops)",
        ),
        Binding(
            "r",
            "resume",
            "Resume",
            show=False,
            tooltip="resume a failed, cancelled or stalled run from its newest checkpoint",
        ),
        Binding(
            "d",
            "describe",
            "Describe",
            show=False,
            tooltip="describe: the run's row, its run.json and newest trainer_state.json, escaped (y copies)",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.marked: dict[str, set[str]] = {}

    def compose_body(self) -> ComposeResult:
        yield self.make_table()
        with VerticalScroll(id="run-detail", can_focus=False):
            yield Static(id="run-title", classes="detail")
            yield Static(id="run-trend")
            with Horizontal(id="run-middle"):
                yield LossChart(id="run-chart")
                with Vertical(id="run-ckpts"):
                    yield Label("Checkpoints (space marks, p purges)", classes="section")
                    yield CheckpointTable(
                        [("mark", " ", 1), ("step", "Step"), ("size", "Size"), ("path", "Path")],
                        id="ckpt-table",
                        classes="auto",
                    )
        yield Label(LOG_LABEL, classes="section", id="run-log-label")
        yield LogPane(id="run-log", max_lines=LOG_LINES, auto_scroll=True)

    def column_widths(self, width: int, need: dict[str, int] | None) -> dict[str, int]:
        # `need`: the widest run name and host name shown (`_fit_columns`)
        return run_layout(width, need)

    def _fit_columns(self, runs: Sequence[Run], listing: tuple) -> None:
        """Lay the table out for the names shown: the name column as wide as the widest,
        measured again when `listing` (what says which runs are listed, under which names)
        changed."""
        if getattr(self, "_need_for", None) != listing:
            self._need_for = listing
            self._need = {
                "name": max((cell_len(shown(r.name)) for r in runs), default=0),
                "host": max((cell_len(r.host) for r in runs), default=0),
            }
        self.relayout(self.size.width or self.app.size.width)

    @property
    def selected(self) -> Run | None:
        """The run under the cursor."""
        key = self.table.current_key
        if not key:
            return None
        r = getattr(self, "_by_key", {}).get(key)
        return r if r is not None else self.state.run(key)

    def refresh_view(self) -> None:
        # every run's key, in order; a row's cells are made when it is drawn (or filtered,
        # sorted, read): 3,000 runs, a screenful on screen
        runs = self.state.runs
        # which runs are listed, under which hosts and names: the model says when that changed
        # (comparing 3,000 names each poll cost 2 ms)
        listing = (self.state.runs_listing, self.host_scope)
        if self.host_scope is not None:
            runs = [r for r in runs if r.host == self.host_scope]
        self._fit_columns(runs, listing)
        w = self._widths
        # the columns' short labels change only when the hosts, the names or the widths do (a
        # poll mostly moves steps and losses): escaping and shortening 3,000 names each poll was
        # a third of a Runs repaint
        label_key = (w["host"], w["name"], listing)
        if getattr(self, "_labels", (None,))[0] != label_key:
            # a host or run name is never cut: one longer than its column wraps in it, and its
            # row is as tall as the longer of the two
            hosts = {r.host: folded(r.host, w["host"]) for r in runs}
            names = {r.name: folded(shown(r.name), w["name"]) for r in runs}
            heights = {
                r.key: n
                for r in runs
                if (n := max(hosts[r.host].count("\n"), names[r.name].count("\n")) + 1) > 1
            }
            self._labels = (label_key, hosts, names, heights)
        _, hosts, names, heights = self._labels
        # the same listing is the same keys in the same order (a key is host:path): made once
        # per listing, not 3,000 keys at each poll
        if getattr(self, "_keys", (None,))[0] != listing:
            self._keys = (listing, [r.key for r in runs])
        by_key = dict(zip(self._keys[1], runs, strict=True))
        down = self.down_hosts()

        def make(key: str) -> tuple:
            r = by_key[key]
            return run_cells(r, w, hosts[r.host], names[r.name], r.host in down)

        self._by_key = by_key
        with self.app.batch_update():
            self.table.sync_lazy(list(by_key), make, heights)
            self.show_run()

    def down_hosts(self) -> frozenset[str]:
        """The hosts that did not answer the last poll (their runs are their last answer's)."""
        return frozenset(n for n, h in self.state.hosts.items() if not h.reachable)

    def down_note(self, host: str) -> str | None:
        """A sentence for a run whose host did not answer the last poll: why, and how old what
        is shown is; None while it answers."""
        live = self.state.hosts.get(host)
        if live is None or live.reachable:
            return None
        age = self.state.age(host)
        _, why = down_words(live)
        since = "" if age is None else f", {duration_short(age)} ago"
        return f"{host} did not answer ({why}): this is its last answer{since}"

    #: the one host shown (`:runs HOST`), or None for every host
    host_scope: str | None = None

    def scope_host(self, host: str | None) -> None:
        """Show the runs of `host` alone (None: every host's)."""
        self.host_scope = host
        self.sub_title = f"runs on {host} only (:runs shows every host)" if host else None
        self.refresh_view()

    def on_data_table_row_highlighted(self, event: KeyedTable.RowHighlighted) -> None:
        if event.data_table.id == "runs-table":
            self.show_run(browsing=True)

    def on_keyed_table_choice_changed(self, event: KeyedTable.ChoiceChanged) -> None:
        if event.table.id == "runs-table":
            self.show_run()  # a filter that lets no row through moves no cursor

    def on_data_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
        if event.data_table.id == "runs-table":
            self.action_open_checkpoints()

    def action_open_checkpoints(self) -> None:
        """Move the focus to the selected run's checkpoints."""
        self.query_one("#ckpt-table").focus()

    def show_run(self, browsing: bool = False) -> None:
        """Fill the detail pane for the selected run; `browsing`: the cursor moved onto it, so
        its log is read once the cursor rests there (see `_read_log_soon`)."""
        r = self.selected
        title = self.query_one("#run-title", Static)
        if r is None:
            if (none := self.filtered_out("run")) is not None:
                show_text(title, none)
            elif self.host_scope is not None:
                show_text(
                    title,
                    Text(f"No runs on {self.host_scope} (:runs shows every host).", style="dim"),
                )
            else:
                show_text(title, self.no_runs_text())
            show_text(self.query_one("#run-trend", Static), "")
            self.query_one("#run-chart", LossChart).show((), ())
            self.show_log("")
            self.query_one("#ckpt-table", KeyedTable).sync({})
            return
        show_text(title, run_title(r, self.down_note(r.host)))
        show_text(self.query_one("#run-trend", Static), eval_trend(r.eval_losses))
        self.query_one("#run-chart", LossChart).show(r.losses, r.eval_losses)
        marks = self.marked.setdefault(r.key, set())
        marks &= {c.path for c in r.checkpoints}
        self.query_one("#ckpt-table", KeyedTable).sync(checkpoint_rows(r, marks))
        if self._following is not None and self._following != r.key:
            self.stop_following()
        if not self.is_current:
            return  # built ahead and not shown yet: no log is read from a host until it is
        if self._following is None and (
            self._log_for != r.key or r.state in ("running", "stalled")
        ):
            if browsing and self._log_for != r.key:
                self._read_log_soon(r)
            else:
                self.load_log(r)

    def no_runs_text(self) -> Text:
        """Where runs are looked for, so a first look at an empty view says what to do."""
        roots = "; ".join(f"{h.name}: {', '.join(h.runs) or 'none'}" for h in self.app.fleet.hosts)
        t = Text(
            "No runs yet. A run is a folder directly under a host's runs folders (", style="dim"
        )
        t.append(roots, style="bold")
        src = self.app.fleet.source
        where = "a fleet file, hosts.toml (see the README)" if src.startswith("built-in") else src
        t.append(f"). Press n to launch one, or set runs for a host in {where}.", style="dim")
        return t

    # -- the actions on the selected run (tui/views/run_actions.py) ---------------------------
    def action_describe(self) -> None:
        """The raw source behind the highlighted run."""
        run_actions.describe(self)

    def action_purge(self) -> None:
        """Purge the marked checkpoints of the selected run (or the highlighted one)."""
        run_actions.purge(self)

    def action_mirror(self) -> None:
        """Mirror the selected run's adapter to another host."""
        run_actions.mirror(self)

    def action_resume(self) -> None:
        """Offer to continue the selected failed or stopped run from its newest checkpoint."""
        if (r := run_actions.run_to_resume(self)) is not None:
            self.open_resume(r)

    @work(exclusive=True, group="resume", exit_on_error=False)
    async def open_resume(self, run: Run) -> None:
        """Read the run's own RUN.toml on its host, then open the launch pop-up to resume it."""
        await run_actions.open_resume(self, run)

    def toggle_mark(self, path: str | None) -> None:
        """Mark or unmark one checkpoint of the selected run for purge."""
        r = self.selected
        if r is None or path is None:
            return
        marks = self.marked.setdefault(r.key, set())
        marks.symmetric_difference_update({path})
        self.show_run()
