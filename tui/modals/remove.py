"""The Remove schedule modal: pre-check, the id typed back, then the backend's checked removal."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.widgets import Input, Label, Static

from fleetdeck.backend.actions.schedules import check_removal, remove_schedule
from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import said
from fleetdeck.tui.messages import ActionFinished
from fleetdeck.tui.modals.modal import TypedConfirmModal


class RemoveScheduleModal(TypedConfirmModal):
    """Remove one schedule; Remove stays disabled until the host confirmed the entry is there
    as listed and its id is typed exactly. Focus starts in the id field."""

    DIALOG_ID = "remove-dialog"

    def __init__(self, schedule: Schedule, check: Any = None) -> None:
        """`check`: a removal check already made (shown as is; removal re-checks on the host)."""
        super().__init__()
        self.schedule = schedule
        self.check = check
        self.check_ok: bool | None = None

    @property
    def report(self) -> Any:
        """The backend's report once Remove ran."""
        return self.result

    def title_text(self) -> str:
        s = self.schedule
        return f"Remove {shown(s.kind)} {shown(s.id)} on {s.host}"

    def compose_body(self) -> ComposeResult:
        s = self.schedule
        t = Text()
        t.append("When:    ", style="bold")
        t.append(f"{shown(s.spec)}\n")
        t.append("Command: ", style="bold")
        t.append(f"{shown(s.command)}\n")
        t.append("Source:  ", style="bold")
        t.append(f"{shown(s.source)} (user {shown(s.user)}{f', pid {s.pid}' if s.pid else ''})")
        if s.reasons:
            t.append("\nStray:   ", style="bold")
            t.append(shown(", ".join(s.reasons)), style="bold red")
        yield Static(t)
        yield Static(Text("checking the host…", style="dim"), id="remove-check")
        yield Label(Text.assemble("Type the id ", (shown(s.id), "bold"), " to confirm:"))
        yield Input(
            placeholder="type the id shown above",
            id="remove-confirm",
            classes="confirm",
            compact=True,
        )
        yield Static(id="remove-result")

    def prepare(self) -> None:
        if self.check is None:
            self.run_check()
        else:
            self.show_check(self.check)

    def expected(self, field: Input) -> str | None:
        return self.schedule.id

    def checks_passed(self) -> bool:
        return self.check_ok is True

    def act_label(self) -> str:
        s = self.schedule
        if s.kind == "loop":
            return f"Stop loop pid {s.pid}" if s.pid else "Stop loop"
        if s.kind in ("crontab", "cron-file"):
            return (
                f"Remove line {s.line} of {shown(s.source)}"
                if getattr(s, "line", None)
                else f"Remove {s.kind} entry"
            )
        if s.kind == "systemd-timer":
            return f"Stop and disable {shown(getattr(s, 'unit', None) or 'timer')}"
        if s.kind == "at":
            return f"Remove at job {shown(getattr(s, 'job', None) or s.id)}"
        return f"Remove {shown(s.kind)} {shown(s.id)}"

    def act(self) -> None:
        self.do_remove()

    @work(exclusive=True, group="remove-check", exit_on_error=False)
    async def run_check(self) -> None:
        """Ask the host whether the entry is still there exactly as listed."""
        box = self.query_one("#remove-check", Static)
        try:
            check = await check_removal(self.app.link(self.schedule.host), self.schedule)
        except Exception as e:
            self.check_ok = False
            box.update(Text(f"✖ cannot check: {said(getattr(e, 'message', e))}", style="bold red"))
            self.refresh_act()
            return
        self.show_check(check)

    def show_check(self, check: Any) -> None:
        """The host's answer: still there as listed, or why removal is refused."""
        box = self.query_one("#remove-check", Static)
        self.check_ok = bool(check.ok)
        if check.ok:
            box.update(
                Text(f"✔ {said(check.message or 'still present as listed')}", style="bold green")
            )
        else:
            box.update(
                Text(
                    f"✖ refused ({said(check.reason_code)}): {said(check.message)}",
                    style="bold red",
                )
            )
        self.refresh_act()

    @work(exclusive=True, group="remove", exit_on_error=False)
    async def do_remove(self) -> None:
        """Remove through the backend (which re-checks and audits) and show the report."""
        s = self.schedule
        typed = self.query_one("#remove-confirm", Input).value
        self.done = True
        self.refresh_act()
        result = self.query_one("#remove-result", Static)
        result.update(Text("removing…", style="dim"))
        try:
            rep = await remove_schedule(self.app.link(s.host), s, typed)
        except Exception as e:
            self.app.report_error(f"Remove {shown(s.id)}", e)
            result.update(Text(f"✖ {said(getattr(e, 'message', e))}", style="bold red"))
            return
        self.result = rep
        if rep.ok:
            extra = f" Backup: {said(rep.backup)}." if rep.backup else ""
            result.update(Text(f"✔ removed: {said(rep.message)}.{extra}", style="bold green"))
        else:
            result.update(
                Text(
                    f"✖ {said(rep.result)} ({said(rep.reason_code)}): {said(rep.message)}",
                    style="bold red",
                )
            )
        self.finished()
        self.app.post_message(
            ActionFinished(
                "remove", s.host, rep.ok, f"{shown(s.id)} on {s.host}: {said(rep.message)}"
            )
        )
