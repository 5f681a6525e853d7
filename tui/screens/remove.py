"""The Remove schedule modal: pre-check, the id typed back, then the backend's checked removal."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from fleetdeck.backend.actions.schedules import check_removal, remove_schedule
from fleetdeck.backend.models import Schedule

from ..messages import ActionFinished
from .modal import Modal


class RemoveScheduleModal(Modal):
    """Remove one schedule; Remove stays disabled until the id is typed exactly. Focus: Cancel."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, schedule: Schedule, check: Any = None) -> None:
        """`check`: a removal check already made (shown as is; removal re-checks on the host)."""
        super().__init__()
        self.schedule = schedule
        self.check = check
        self.check_ok: bool | None = None
        self.report = None

    def compose(self) -> ComposeResult:
        s = self.schedule
        with Vertical(classes="dialog", id="remove-dialog"):
            yield Label(f"Remove {s.kind} {s.id} on {s.host}", classes="title")
            t = Text()
            t.append("When:    ", style="bold")
            t.append(f"{s.spec}\n")
            t.append("Command: ", style="bold")
            t.append(f"{s.command}\n")
            t.append("Source:  ", style="bold")
            t.append(f"{s.source} (user {s.user}{f', pid {s.pid}' if s.pid else ''})\n")
            if s.reasons:
                t.append("Stray:   ", style="bold")
                t.append(", ".join(s.reasons), style="bold red")
            yield Static(t)
            yield Static(Text("checking the host…", style="dim"), id="remove-check")
            yield Label(f"Type the id {s.id} to confirm:")
            yield Input(placeholder="type the id shown above", id="remove-confirm", compact=True)
            yield Static(id="remove-result")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Remove", id="remove", variant="error", disabled=True)

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()
        if self.check is None:
            self.run_check()
        else:
            self.show_check(self.check)

    @work(exclusive=True, group="remove-check", exit_on_error=False)
    async def run_check(self) -> None:
        """Ask the host whether the entry is still there exactly as listed."""
        box = self.query_one("#remove-check", Static)
        try:
            check = await check_removal(self.app.link(self.schedule.host), self.schedule)
        except Exception as e:
            self.check_ok = False
            box.update(Text(f"✖ cannot check: {getattr(e, 'message', e)}", style="bold red"))
            self._update_button()
            return
        self.show_check(check)

    def show_check(self, check: Any) -> None:
        """The host's answer: still there as listed, or why removal is refused."""
        box = self.query_one("#remove-check", Static)
        self.check_ok = check.ok
        if check.ok:
            box.update(Text(f"✔ {check.message or 'still present as listed'}", style="bold green"))
        else:
            box.update(Text(f"✖ refused ({check.reason_code}): {check.message}", style="bold red"))
        self._update_button()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.input.set_class(event.value == self.schedule.id, "typed-ok")
        self._update_button()

    def _update_button(self) -> None:
        typed = self.query_one("#remove-confirm", Input).value
        ok = typed == self.schedule.id and self.check_ok is not False and self.report is None
        self.query_one("#remove", Button).disabled = not ok

    def on_input_submitted(self) -> None:
        if not self.query_one("#remove", Button).disabled:
            self.do_remove()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "remove":
            self.do_remove()
        else:
            self.dismiss(self.report)

    def action_cancel(self) -> None:
        """Close without changing anything (unless a removal already ran)."""
        self.dismiss(self.report)

    @work(exclusive=True, group="remove", exit_on_error=False)
    async def do_remove(self) -> None:
        """Remove through the backend (which re-checks and audits) and show the report."""
        s = self.schedule
        typed = self.query_one("#remove-confirm", Input).value
        self.query_one("#remove", Button).disabled = True
        result = self.query_one("#remove-result", Static)
        result.update(Text("removing…", style="dim"))
        try:
            rep = await remove_schedule(self.app.link(s.host), self.app.fleet.host(s.host), s, typed)
        except Exception as e:
            self.app.report_error(f"Remove {s.id}", e)
            result.update(Text(f"✖ {e}", style="bold red"))
            return
        self.report = rep
        if rep.ok:
            extra = f" Backup: {rep.backup}." if rep.backup else ""
            result.update(Text(f"✔ removed: {rep.message}.{extra}", style="bold green"))
        else:
            result.update(Text(f"✖ {rep.result} ({rep.reason_code}): {rep.message}", style="bold red"))
        self.query_one("#cancel", Button).label = "Close"
        self.query_one("#cancel", Button).focus()
        self.app.post_message(ActionFinished("remove", s.host, rep.ok,
                                             f"{s.id} on {s.host}: {rep.message}"))
