"""The Launch modal: host, RUN.toml and an optional "after" run; pre-flight shown before starting."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import human_bytes, said
from fleetdeck.tui.messages import ActionFinished
from fleetdeck.tui.modals.modal import Modal


class LaunchModal(Modal):
    """Start a run: Launch is enabled only after a pre-flight of exactly these inputs passed."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        host: str | None = None,
        run_toml: str = "",
        after: str = "",
        resume: Any = None,
        values: dict[str, Any] | None = None,
    ) -> None:
        """`resume`: a failed or stopped run to continue from its newest checkpoint, with
        `values` its RUN.toml as the host keeps it (`<run>/RUN.toml`)."""
        super().__init__()
        self.host = resume.host if resume is not None else host
        self.resume = resume
        self.values = values
        self.run_toml = (
            f"{shown(resume.path)}/RUN.toml (on {resume.host})" if resume is not None else run_toml
        )
        self.after = after
        self.checked: tuple | None = None  # the inputs the last passing pre-flight was for
        self.preflight_result: Any = None
        self.result: Any = None

    def compose(self) -> ComposeResult:
        hosts = [(h.name, h.name) for h in self.app.fleet.hosts]
        with Vertical(classes="dialog", id="launch-dialog"):
            title = (
                f"Resume {shown(self.resume.name)} on {self.host} from its newest checkpoint"
                if self.resume
                else "Launch a training run"
            )
            yield Label(Text(title), classes="title")
            yield Label("Host:")
            yield Select(
                hosts,
                id="launch-host",
                allow_blank=False,
                compact=True,
                value=self.host if self.host else hosts[0][1],
                disabled=self.resume is not None,
            )
            yield Label(
                "RUN.toml (the host's own copy):"
                if self.resume
                else "RUN.toml (a file on this machine):"
            )
            yield Input(
                self.run_toml,
                placeholder="path/to/RUN.toml",
                id="launch-toml",
                compact=True,
                disabled=self.resume is not None,
            )
            yield Label(
                "After (optional): start only once this run on the host has finished with an adapter"
            )
            yield Input(
                self.after,
                placeholder="e.g. ~/runs/run-6 (empty: start now)",
                id="launch-after",
                compact=True,
            )
            with VerticalScroll(can_focus=False):
                yield Static(
                    Text("Pre-flight checks the host before anything starts.", style="dim"),
                    id="launch-verdict",
                )
                yield DataTable(id="launch-checks", cursor_type="none", zebra_stripes=True)
                yield Static(id="launch-result")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Pre-flight", id="preflight", variant="primary")
                yield Button(
                    Text(self.launch_label()), id="launch", variant="success", disabled=True
                )

    def on_mount(self) -> None:
        table = self.query_one("#launch-checks", DataTable)
        table.add_columns("Check", "", "Why")
        table.can_focus = False
        table.display = False  # an empty table's header means nothing until a pre-flight ran
        self.query_one("#launch-after" if self.resume else "#launch-toml", Input).focus()

    def launch_label(self) -> str:
        """What the launch button does, exactly."""
        pre = self.preflight_result
        if pre is None or self.checked is None or self.checked != self.inputs():
            return "Launch (pre-flight first)"
        name = shown(pre.run_path.rstrip("/").rsplit("/", 1)[-1])
        if self.resume is not None:
            return f"Resume {name} on {pre.host}"
        if pre.after:
            return f"Queue {name} on {pre.host} after {shown(pre.after.rstrip('/').rsplit('/', 1)[-1])}"
        return f"Start {name} on {pre.host}"

    def run_arg(self, toml: str) -> Any:
        """What the backend is given as the run: the host's RUN.toml values when resuming."""
        return self.values if self.resume is not None else toml

    def inputs(self) -> tuple[str, str, str | None]:
        """(host, RUN.toml path, after or None) as entered."""
        after = self.query_one("#launch-after", Input).value.strip()
        return (
            str(self.query_one("#launch-host", Select).value),
            self.query_one("#launch-toml", Input).value.strip(),
            after or None,
        )

    def on_input_changed(self) -> None:
        self._update_button()

    def on_input_submitted(self) -> None:
        # enter in a field runs the pre-flight; once it passed, focus moves to the button that
        # says what will start, so a second enter is a deliberate one
        if not self.query_one("#launch", Button).disabled:
            self.query_one("#launch", Button).focus()
        else:
            self.run_preflight()

    def on_select_changed(self) -> None:
        self._update_button()

    def _update_button(self) -> None:
        ok = self.checked is not None and self.checked == self.inputs() and self.result is None
        button = self.query_one("#launch", Button)
        button.disabled = not ok
        button.label = Text(self.launch_label())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "preflight":
            self.run_preflight()
        elif event.button.id == "launch":
            self.run_launch()
        else:
            self.dismiss(self.result)

    def action_cancel(self) -> None:
        """Close without starting anything (unless Launch already ran)."""
        self.dismiss(self.result)

    def show_checks(self, pre: Any) -> None:
        """Every pre-flight check with its verdict and reason."""
        table = self.query_one("#launch-checks", DataTable)
        table.clear()
        table.display = True
        for c in pre.checks:
            table.add_row(
                Text(said(c.name)),
                Text("✔" if c.ok else "✖", style="bold green" if c.ok else "bold red"),
                Text(said(c.message), style="" if c.ok else "red"),
                height=None,
            )
        est = pre.estimate or {}
        verdict = (
            Text("✔ every pre-flight check passed; Launch is enabled.\n", style="bold green")
            if pre.ok
            else Text(
                f"✖ refused ({said(pre.refusal.name)}): {said(pre.refusal.message)}\n",
                style="bold red",
            )
        )
        if est.get("memory_bytes"):
            verdict.append(
                f"estimate: {human_bytes(est['memory_bytes'])} of memory on {said(est.get('device', '?'))}, "
                f"{est.get('lora_params', '?'):,} LoRA parameters",
                style="dim",
            )
        self.query_one("#launch-verdict", Static).update(verdict)

    @work(exclusive=True, group="launch", exit_on_error=False)
    async def run_preflight(self) -> None:
        """Ask the host every launch check; nothing is started."""
        # deferred: actions.launch (its helper modules and the run config, ~50 ms at start-up)
        from fleetdeck.backend.actions.launch import preflight

        host, toml, after = self.inputs()
        self.checked = None
        self._update_button()
        if not toml:
            self.notify(
                "Type the path of a RUN.toml first.",
                title="Launch",
                severity="warning",
                markup=False,
            )
            return
        self.query_one("#launch-verdict", Static).update(Text("running pre-flight…", style="dim"))
        try:
            pre = await preflight(
                self.app.link(host), self.run_arg(toml), after=after, resume=self.resume is not None
            )
        except Exception as e:
            self.query_one("#launch-verdict", Static).update(
                Text(f"✖ {said(getattr(e, 'message', None) or e)}", style="bold red")
            )
            self.app.report_error("Pre-flight", e)
            return
        self.show_checks(pre)
        self.preflight_result = pre
        if pre.ok:
            self.checked = (host, toml, after)
        self._update_button()
        if pre.ok:
            self.query_one("#launch", Button).focus()

    @work(exclusive=True, group="launch", exit_on_error=False)
    async def run_launch(self) -> None:
        """Start (or queue) the run through the backend, which checks again and audits."""
        # deferred: actions.launch (its helper modules and the run config, ~50 ms at start-up)
        from fleetdeck.backend.actions.launch import launch

        host, toml, after = self.inputs()
        self.query_one("#launch", Button).disabled = True
        out = self.query_one("#launch-result", Static)
        out.update(Text("starting…", style="dim"))
        try:
            res = await launch(
                self.app.link(host), self.run_arg(toml), after=after, resume=self.resume is not None
            )
        except Exception as e:
            out.update(Text(f"✖ {said(getattr(e, 'message', None) or e)}", style="bold red"))
            self.app.report_error("Launch", e)
            return
        self.result = res
        self.show_checks(res.preflight)
        if res.ok:
            pid = f"pid {res.pid}" if res.pid else f"waiter pid {res.waiter_pid}"
            out.update(
                Text(
                    f"✔ {said(res.state)}: {shown(res.run_path)} on {host} ({pid})",
                    style="bold green",
                )
            )
        else:
            out.update(
                Text(
                    f"✖ {said(res.state)} ({said(res.reason or '-')}): {said(res.error)}",
                    style="bold red",
                )
            )
        self.query_one("#cancel", Button).label = "Close"
        self.query_one("#cancel", Button).focus()
        self.app.post_message(
            ActionFinished(
                "launch", host, res.ok, f"{shown(res.run_path)} on {host}: {said(res.state)}"
            )
        )
