"""The Stop process modal: the pid and program typed back exactly as shown (a program name
with control characters is shown escaped and typed escaped), then a checked TERM (KILL after a
grace) by the host's helper, which refuses a process that is not the one listed any more;
"stopped" only with its witness, the pid with its start time gone."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.widgets import Input, Label, Static

from fleetdeck.backend.actions.processes import confirmation, stop_process
from fleetdeck.backend.fleet.models import Process
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.tui.fmt import human_bytes, said
from fleetdeck.tui.messages import ActionFinished
from fleetdeck.tui.screens.modal import TypedConfirmModal


class StopProcessModal(TypedConfirmModal):
    """Stop one process of `host`; the button stays disabled until `PID PROGRAM` is typed."""

    DIALOG_ID = "stop-dialog"

    def __init__(self, host: str, process: Process) -> None:
        super().__init__()
        self.host = host
        self.process = process

    def title_text(self) -> str:
        return f"Stop process {self.process.pid} on {self.host}"

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
        t.append(human_bytes(p.rss_bytes, "-"))
        if p.gpu_mib:
            t.append("   GPU ", style="bold")
            t.append(f"{p.gpu_mib:,.0f} MiB")
        t.append("\nListed as: ", style="bold")
        t.append(", ".join(p.why) or "-")
        t.append("\nSIGTERM first; SIGKILL if it is still there after 10 s. The host checks it is "
                 "still this process (pid, start time, command) before any signal.", style="dim")
        yield Static(t)
        # confirmation() is the text as shown (escaped already): typed back as it reads here
        yield Label(Text.assemble("Type ", (confirmation(p), "bold"), " to confirm:"))
        yield Input(placeholder="the pid and the program, exactly as shown", id="stop-confirm",
                    classes="confirm", compact=True)
        yield Static(id="stop-result")

    def expected(self, field: Input) -> str | None:
        return confirmation(self.process)

    def act_label(self) -> str:
        return f"Stop process {self.process.pid}"

    def act(self) -> None:
        self.do_stop()

    @work(exclusive=True, group="stop", exit_on_error=False)
    async def do_stop(self) -> None:
        typed = self.query_one("#stop-confirm", Input).value
        self.done = True
        self.refresh_act()
        box = self.query_one("#stop-result", Static)
        box.update(Text("stopping…", style="dim"))
        rep = await stop_process(self.app.link(self.host), self.process, typed)
        self.result = rep
        if rep.ok:
            box.update(Text(f"✔ {said(rep.message)}", style="bold green"))
        else:
            box.update(Text(f"✖ {said(rep.result)} ({said(rep.reason_code)}): {said(rep.message)}",
                            style="bold red"))
        self.app.post_message(ActionFinished("stop process", self.host, rep.ok, said(rep.message)))
        self.finished()
