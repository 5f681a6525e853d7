"""The Remove schedule modal: pre-check, the id typed back, then the backend's checked removal."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Input, Label, Static

from fleetdeck.backend.actions.schedules import (
    RemovalCheck,
    RemoveReport,
    check_removal,
    remove_schedule,
)
from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import said
from fleetdeck.tui.modals.typed_confirm import Outcome, TypedConfirmModal


class RemoveScheduleModal(TypedConfirmModal[RemovalCheck, RemoveReport]):
    """Remove one schedule; Remove stays disabled until the host confirmed the entry is there
    as listed and its id is typed exactly. Focus starts in the id field."""

    DIALOG_ID = "remove-dialog"
    PLAN_BOX = "remove-check"
    PLAN_FAILED = "cannot check"
    RESULT_BOX = "remove-result"
    RUNNING = "removing…"

    def __init__(self, schedule: Schedule, check: RemovalCheck | None = None) -> None:
        """`check`: a removal check already made (shown as is; removal re-checks on the host)."""
        super().__init__()
        self.schedule = schedule
        self.plan = check

    def title_text(self) -> str:
        s = self.schedule
        return f"Remove {shown(s.kind)} {shown(s.id)} on {s.host}"

    def memory_key(self) -> tuple | None:
        return ("remove", self.schedule.host, self.schedule.id)

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
        self.show_or_gather()

    def expected(self, field: Input) -> str | None:
        return self.schedule.id

    def checks_passed(self) -> bool:
        return self.plan is not None and bool(self.plan.ok)

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

    async def make_plan(self) -> RemovalCheck:
        """Ask the host whether the entry is still there exactly as listed."""
        return await check_removal(self.app.link(self.schedule.host), self.schedule)

    def show_plan(self, plan: RemovalCheck) -> None:
        """The host's answer: still there as listed, or why removal is refused."""
        box = self.query_one("#remove-check", Static)
        if plan.ok:
            box.update(
                Text(f"✔ {said(plan.message or 'still present as listed')}", style="bold green")
            )
        else:
            box.update(
                Text(
                    f"✖ refused ({said(plan.reason_code)}): {said(plan.message)}",
                    style="bold red",
                )
            )
        self.refresh_act()

    async def run(self) -> RemoveReport:
        """Remove through the backend (which re-checks and audits)."""
        s = self.schedule
        typed = self.query_one("#remove-confirm", Input).value
        return await remove_schedule(self.app.link(s.host), s, typed)

    def failed_what(self) -> str:
        return f"Remove {shown(self.schedule.id)}"

    def show_result(self, report: RemoveReport) -> None:
        result = self.query_one("#remove-result", Static)
        if report.ok:
            extra = (
                f" Another copy on this machine: {said(report.backup)}." if report.backup else ""
            )
            result.update(Text(f"✔ removed: {said(report.message)}.{extra}", style="bold green"))
        else:
            result.update(
                Text(
                    f"✖ {said(report.result)} ({said(report.reason_code)}): {said(report.message)}",
                    style="bold red",
                )
            )

    def summary(self, report: RemoveReport) -> Outcome:
        s = self.schedule
        return Outcome(
            "remove", s.host, report.ok, f"{shown(s.id)} on {s.host}: {said(report.message)}"
        )
