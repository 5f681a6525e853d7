"""The Stop process modal: a signal chosen (TERM unless the operator picks INT, HUP, STOP, CONT or
KILL), the pid and program typed back exactly as shown (a program name with control characters
is shown escaped and typed escaped), then the checked signal by the host's helper, which refuses
a process that is not the one listed any more; "stopped" only with its witness, the pid with its
start time gone, "paused" / "resumed" only with the state the host read after the signal."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Input, Label, Select, Static

from fleetdeck.backend.actions.processes import SIGNALS, StopReport, confirmation, stop_process
from fleetdeck.backend.fleet.models import Process
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.fmt import said
from fleetdeck.tui.modals.typed_confirm import Outcome, TypedConfirmModal


class StopProcessModal(TypedConfirmModal[None, StopReport]):
    """Signal one process of `host` (TERM unless another signal is chosen); the button stays
    disabled until `PID PROGRAM` is typed."""

    DIALOG_ID = "stop-dialog"
    RESULT_BOX = "stop-result"

    def __init__(self, host: str, process: Process, listed: bool = True) -> None:
        super().__init__()
        self.host = host
        self.process = process
        #: False: the process is not in the latest listing (the Host view held its row)
        self.listed = listed

        #: the chosen signal's name (a key of SIGNALS), as the chooser last said
        self.signal = "TERM"

    def title_text(self) -> str:
        return f"Stop process {self.process.pid} on {self.host}"

    def memory_key(self) -> tuple | None:
        return ("stop", self.host, self.process.pid, self.process.start)

    def compose_body(self) -> ComposeResult:
        p = self.process
        t = Text()
        t.append("Command: ", style="bold")
        t.append(f"{shown(p.command)}\n")
        t.append("User:    ", style="bold")
        t.append(f"{shown(p.user)}   ")
        t.append("CPU ", style="bold")
        t.append("-" if p.cpu_pct is None else f"{p.cpu_pct:.0f}%")
        t.append("   RSS ", style="bold")
        t.append(size_short(p.rss_bytes, "-"))
        if p.gpu_mib:
            t.append("   GPU ", style="bold")
            t.append(f"{p.gpu_mib:,.0f} MiB")
        t.append("\nListed as: ", style="bold")
        t.append(", ".join(p.why) or "-")
        if not self.listed:
            t.append(
                "\nNot in the latest listing: it may have ended (the host checks).", style="yellow"
            )
        t.append(
            "\nThe host checks it is still this process (pid, start time, command) before "
            "any signal.",
            style="dim",
        )
        yield Static(t)
        yield Select(
            [(f"SIG{n}: {what}", n) for n, what in SIGNALS.items()],
            value="TERM",
            allow_blank=False,
            id="stop-signal",
            compact=True,
        )
        # confirmation() is the text as shown (escaped already): typed back as it reads here
        yield Label(Text.assemble("Type ", (confirmation(p), "bold"), " to confirm:"))
        yield Input(
            placeholder="the pid and the program, exactly as shown",
            id="stop-confirm",
            classes="confirm",
            compact=True,
        )
        yield Static(id="stop-result")

    def expected(self, field: Input) -> str | None:
        return confirmation(self.process)

    def act_label(self) -> str:
        return act_label(self.signal, self.process.pid)

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if isinstance(event.value, str) and event.value in SIGNALS and not self.done:
            self.signal = event.value
        self.refresh_act()

    def running(self) -> str:
        return f"sending SIG{self.signal}…"

    def starting(self) -> None:
        self.query_one("#stop-signal", Select).disabled = True
        super().starting()

    async def run(self) -> StopReport:
        typed = self.query_one("#stop-confirm", Input).value
        return await stop_process(self.app.link(self.host), self.process, typed, signal=self.signal)

    def failed_what(self) -> str:
        return f"Stop process {self.process.pid} on {self.host}"

    def show_result(self, report: StopReport) -> None:
        box = self.query_one("#stop-result", Static)
        if report.ok:
            box.update(Text(f"✔ {said(report.message)}", style="bold green"))
        else:
            box.update(
                Text(
                    f"✖ {said(report.result)} ({said(report.reason_code)}): {said(report.message)}",
                    style="bold red",
                )
            )

    def summary(self, report: StopReport) -> Outcome:
        return Outcome(
            f"stop process (SIG{self.signal})", self.host, report.ok, said(report.message)
        )


def act_label(signal: str, pid: int) -> str:
    """What the action button says it will do with `signal` to `pid`."""
    if signal == "TERM":
        return f"Stop process {pid} (SIGTERM)"
    if signal == "KILL":
        return f"Kill process {pid} (SIGKILL)"
    return f"Send SIG{signal} to process {pid}"
