"""The Runs view's log pane: the selected run's train.log, read from its host once the cursor
rests on the run (`l` reads it again), or followed live (`f`), with the pane's search and wrap
in its label. A mixin of `RunsScreen` (`tui/views/runs.py`), which holds the pane; the type
checker reads it as a view (`ViewScreen`) with the run selection the Runs view gives it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.timer import Timer
from textual.widgets import Label

from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import said
from fleetdeck.tui.widgets.log_pane import LogPane

if TYPE_CHECKING:
    # what the mixin is mixed into, for the type checker: at run time it is a plain class
    from fleetdeck.tui.views.base import ViewScreen as _View
else:
    _View = object

#: lines of train.log the pane holds (and searches)
LOG_LINES = 200
#: how long the cursor rests on a run before its log is read from the host
LOG_REST_S = 0.25
LOG_LABEL = "train.log (last lines; l reloads, f follows; tab into it: / n N e w)"
FOLLOW_LABEL = "train.log (following; f stops; tab into it: / n N e w)"


def _log_problem(run: Run, e: BaseException) -> str:
    """One plain sentence for a train.log that could not be read (never the tool's stderr)."""
    code = getattr(e, "code", None)
    if code == "no-log":
        return f"no train.log in {shown(run.path)} yet"
    if code == "no-run":
        return f"{shown(run.path)} is not on {shown(run.host)} now (moved or removed?)"
    if code == "not-a-file":
        return "train.log is a symlink or not a regular file: not followed"
    return f"could not read train.log: {said(getattr(e, 'message', e))}"


class RunLog(_View):
    """The log pane's side of the Runs view: `show_run` asks for the selected run's log, this
    reads, follows and shows it."""

    if TYPE_CHECKING:
        # what it uses of the Runs view, which defines both

        @property
        def selected(self) -> Run | None: ...

        def show_run(self, browsing: bool = False) -> None: ...

    #: the run whose train.log the pane shows (or is reading)
    _log_for: str | None = None
    #: the text shown, to leave an unchanged log (and the operator's place in it) alone
    _log_text: str | None = None
    #: the run whose train.log is being followed (`f`), if any
    _following: str | None = None
    #: the read of a log waiting for the cursor to rest (`_read_log_soon`)
    _log_soon: Timer | None = None

    def _read_log_soon(self, run: Run) -> None:
        """Say the log is coming, and read it once the cursor has rested on the run for
        `LOG_REST_S`: a held `j` through 3,000 runs starts one read on the host, not one a row,
        and each row it passes costs only the detail pane's redraw."""
        self.show_log("reading train.log…")
        self._log_for = run.key
        if self._log_soon is not None:
            self._log_soon.stop()

        def read() -> None:
            self._log_soon = None
            r = self.selected
            if r is not None and r.key == run.key and self._following is None:
                self.load_log(r)
            elif self._log_for == run.key and self._following is None:
                # the cursor is elsewhere now without having said so (a filter, a poll): show
                # what it is on, rather than leave "reading train.log…" standing
                self._log_for = None
                self.show_run()

        self._log_soon = self.set_timer(LOG_REST_S, read)

    @work(exclusive=True, group="log", exit_on_error=False)
    async def load_log(self, run: Run) -> None:
        """Read the last lines of the run's train.log through the poller's link (a bounded,
        tied reader on the host: backend/fleet/logs.py)."""
        from fleetdeck.backend.fleet.logs import log_lines

        if self._log_for != run.key:
            self.show_log("reading train.log…")
        self._log_for = run.key
        try:
            lines = [
                line
                async for line in log_lines(
                    self.app.link(run.host), run.path, LOG_LINES, timeout=10
                )
            ]
        except Exception as e:  # a down host must not break the view
            text = _log_problem(run, e)
        else:
            # the host's text, each line escaped by `shown` (a colour code or a clipboard
            # write in train.log is printed, not sent to the terminal); tabs become spaces
            text = "\n".join(shown(line.expandtabs()) for line in lines) or "(train.log is empty)"
        if self._log_for == run.key:
            self.show_log(text)

    @work(exclusive=True, group="log", exit_on_error=False)
    async def follow_log(self, run: Run) -> None:
        """Follow the run's train.log: its last lines, then each appended line as it comes."""
        from fleetdeck.backend.fleet.logs import log_lines

        log = self.query_one("#run-log", LogPane)
        self._following = self._log_for = run.key
        self._log_text = None
        self._log_label = FOLLOW_LABEL
        self._show_log_label()
        log.clear()
        try:
            async for line in log_lines(
                self.app.link(run.host), run.path, LOG_LINES, follow=True, timeout=10
            ):
                log.write_line(shown(line.expandtabs()))
        except Exception as e:  # the host went away, or the log did: say so in the pane
            log.write_line(f"-- stopped following: {_log_problem(run, e)} --")
        finally:
            if self._following == run.key:
                self._following = None
                self._log_label = LOG_LABEL
                self._show_log_label()

    def stop_following(self) -> None:
        """End `f`: the reader on the host ends with its channel."""
        self._following = None
        self.workers.cancel_group(self, "log")
        self._log_label = LOG_LABEL
        self._show_log_label()

    _log_label = LOG_LABEL
    _log_status = ""

    def on_log_pane_status_changed(self, event: LogPane.StatusChanged) -> None:
        self._log_status = event.text
        self._show_log_label()

    def _show_log_label(self) -> None:
        """The pane's label: what l and f do, then the search and wrap as the pane says them."""
        label = (
            self._log_label
            if not self._log_status
            else self._log_label.split(" (")[0] + " · " + self._log_status
        )
        if getattr(self, "_label_shown", None) != label:
            self._label_shown = label
            self.query_one("#run-log-label", Label).update(Text(label))

    def action_follow_log(self) -> None:
        """Start following the selected run's train.log, or stop."""
        if self._following is not None:
            self.stop_following()
            if (r := self.selected) is not None:
                self.load_log(r)
            return
        if (r := self.selected) is not None:
            self.follow_log(r)

    def show_log(self, text: str) -> None:
        """Replace the log pane's lines, scrolled to the newest; `text` is already escaped
        (see `load_log`)."""
        log = self.query_one("#run-log", LogPane)
        if getattr(self, "_log_text", None) == text:
            return  # unchanged: keep the operator's scroll position
        self._log_text = text
        # the same run's log read again (a poll of a running run): the operator's place in it,
        # a search's match or a problem line, stays where it was
        same = getattr(self, "_log_shown_for", None) == self._log_for
        self._log_shown_for = self._log_for
        log.set_lines(text.splitlines(), keep_place=same)

    def action_reload_log(self) -> None:
        """Read the log again."""
        if (r := self.selected) is not None:
            self.load_log(r)
