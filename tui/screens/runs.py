"""The Runs view: every run in the fleet; the selected one's loss curves, checkpoints and log."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, Log, Static

from fleetdeck.backend.models import Run

from ..fmt import human_bytes, human_duration
from ..widgets.keyed_table import KeyedTable
from ..widgets.render import eval_trend, loss_chart, progress
from .base import ViewScreen
from .host import _state_style

LOG_LINES = 50


class CheckpointTable(KeyedTable):
    """Checkpoints of the selected run; space marks one for purge."""

    BINDINGS = [Binding("space", "toggle_mark", "Mark",
                        tooltip="mark / unmark the highlighted checkpoint for purge")]

    def action_toggle_mark(self) -> None:
        """Mark or unmark the highlighted checkpoint."""
        self.screen.toggle_mark(self.current_key)


class RunsScreen(ViewScreen):
    """Runs across the fleet; p purge, m mirror, l reload log."""

    BINDINGS = [
        Binding("enter", "open_checkpoints", "Checkpoints", show=False,
                tooltip="move to the run's checkpoints"),
        Binding("p", "purge", "Purge", tooltip="purge the marked checkpoints (or the highlighted one)"),
        Binding("m", "mirror", "Mirror", tooltip="mirror the run's adapter to another host and verify it"),
        Binding("l", "reload_log", "Log", show=False, tooltip="reload the tail of train.log"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.marked: dict[str, set[str]] = {}
        self._log_for: str | None = None
        self._log_text: str | None = None

    def compose_body(self) -> ComposeResult:
        yield KeyedTable([("host", "Host"), ("name", "Run"), ("state", "State"), ("prog", "Progress"),
                          ("sps", "s/step"), ("eta", "ETA"), ("loss", "Loss"), ("eval", "Eval")],
                         id="runs-table")
        with VerticalScroll(id="run-detail", can_focus=False):
            yield Static(id="run-title", classes="detail")
            yield Static(id="run-trend")
            with Horizontal(id="run-middle"):
                yield Static(id="run-chart")
                with Vertical(id="run-ckpts"):
                    yield Label("Checkpoints (space marks, p purges)", classes="section")
                    yield CheckpointTable([("mark", " ", 1), ("step", "Step"), ("size", "Size"),
                                           ("path", "Path")], id="ckpt-table", classes="auto")
        yield Label("train.log (last lines; l reloads)", classes="section", id="run-log-label")
        yield Log(id="run-log", max_lines=LOG_LINES, auto_scroll=True)

    @property
    def table(self) -> KeyedTable:
        """The runs table."""
        return self.query_one("#runs-table", KeyedTable)

    @property
    def selected(self) -> Run | None:
        """The run under the cursor."""
        key = self.table.current_key
        return self.state.run(key) if key else None

    def refresh_view(self) -> None:
        rows = {}
        for r in self.state.runs:
            rows[r.key] = (r.host, r.name, Text(r.state, style=_state_style(r.state)),
                           progress(r.step, r.max_steps),
                           "-" if r.seconds_per_step is None else f"{r.seconds_per_step:.2f}",
                           "-" if r.eta_seconds is None else human_duration(r.eta_seconds),
                           "-" if r.loss is None else f"{r.loss:.4f}",
                           "-" if r.eval_loss is None else f"{r.eval_loss:.4f}")
        with self.app.batch_update():
            self.table.sync(rows)
            self.show_run()

    def on_data_table_row_highlighted(self, event: KeyedTable.RowHighlighted) -> None:
        if event.data_table.id == "runs-table":
            self.show_run()

    def on_data_table_row_selected(self, event: KeyedTable.RowSelected) -> None:
        if event.data_table.id == "runs-table":
            self.action_open_checkpoints()

    def action_open_checkpoints(self) -> None:
        """Move the focus to the selected run's checkpoints."""
        self.query_one("#ckpt-table").focus()

    def show_run(self) -> None:
        """Fill the detail pane for the selected run."""
        r = self.selected
        title = self.query_one("#run-title", Static)
        if r is None:
            title.update(Text("No runs found under the configured `runs` folders yet.", style="dim"))
            for wid in ("#run-trend", "#run-chart"):
                self.query_one(wid, Static).update("")
            self.show_log("")
            self.query_one("#ckpt-table", KeyedTable).sync({})
            return
        t = Text()
        t.append(f"{r.host}:{r.path}", style="bold")
        t.append(f"  {r.state}", style=_state_style(r.state))
        if r.reason:
            t.append(f" ({r.reason})", style="yellow")
        t.append(f"  adapter: {r.adapter or 'none yet'}", style="dim" if not r.adapter else "")
        title.update(t)
        self.query_one("#run-trend", Static).update(eval_trend(r.eval_losses))
        width = max(20, self.size.width - 60)
        self.query_one("#run-chart", Static).update(loss_chart(r.losses, r.eval_losses, width, 8))
        marks = self.marked.setdefault(r.key, set())
        marks &= {c.path for c in r.checkpoints}
        rows = {c.path: (Text("✓" if c.path in marks else " ", style="bold red"),
                         "?" if c.step is None else str(c.step), human_bytes(c.bytes), c.path.rsplit("/", 1)[-1])
                for c in r.checkpoints}
        self.query_one("#ckpt-table", KeyedTable).sync(rows)
        if self._log_for != r.key or r.state in ("running", "stalled"):
            self.load_log(r)

    def toggle_mark(self, path: str | None) -> None:
        """Mark or unmark one checkpoint of the selected run for purge."""
        r = self.selected
        if r is None or path is None:
            return
        marks = self.marked.setdefault(r.key, set())
        marks.symmetric_difference_update({path})
        self.show_run()

    @work(exclusive=True, group="log", exit_on_error=False)
    async def load_log(self, run: Run) -> None:
        """Read the last lines of the run's train.log through the poller's link."""
        if self._log_for != run.key:
            self.show_log("reading train.log…")
        self._log_for = run.key
        try:
            res = await self.app.link(run.host).run(
                ["tail", "-n", str(LOG_LINES), "--", f"{run.path}/train.log"], timeout=10)
        except Exception as e:  # a down host must not break the view
            text = f"could not read train.log: {getattr(e, 'message', e)}"
        else:
            if res.returncode != 0:
                why = res.stderr.decode("utf-8", "replace").strip().splitlines()
                text = f"no train.log: {why[-1] if why else 'tail failed'}"
            else:
                text = res.stdout.decode("utf-8", "replace").rstrip() or "(train.log is empty)"
        if self._log_for == run.key:
            self.show_log(text)

    def show_log(self, text: str) -> None:
        """Replace the log pane's lines, scrolled to the newest."""
        log = self.query_one("#run-log", Log)
        if getattr(self, "_log_text", None) == text:
            return  # unchanged: keep the operator's scroll position
        self._log_text = text
        log.clear()
        log.write_lines(text.splitlines())

    def action_reload_log(self) -> None:
        """Read the log again."""
        if (r := self.selected) is not None:
            self.load_log(r)

    def action_purge(self) -> None:
        """Purge the marked checkpoints of the selected run (or the highlighted one)."""
        r = self.selected
        if r is None:
            self.notify("No run selected.", severity="warning")
            return
        paths = sorted(self.marked.get(r.key, set()))
        if not paths:
            key = self.query_one("#ckpt-table", KeyedTable).current_key
            paths = [key] if key else []
        if not paths:
            self.notify(f"{r.name} has no checkpoints to purge.", severity="warning")
            return
        from .purge import PurgeModal
        self.app.push_screen(PurgeModal(r.host, paths), lambda _: self.marked.pop(r.key, None))

    def action_mirror(self) -> None:
        """Mirror the selected run's adapter to another host."""
        r = self.selected
        if r is None or not r.adapter:
            self.notify(f"{r.name if r else 'No run'} has no final adapter to mirror yet.",
                        title="Mirror", severity="warning")
            return
        from .mirror import MirrorModal
        self.app.push_screen(MirrorModal(r.host, r.adapter))
