"""The Launch modal: host, RUN.toml and an optional "after" run; pre-flight shown before starting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.fmt import said
from fleetdeck.tui.modals.typed_confirm import Outcome, TypedConfirmModal

if TYPE_CHECKING:
    from fleetdeck.backend.actions.launch.main import LaunchResult, Preflight


class LaunchModal(TypedConfirmModal["Preflight", "LaunchResult"]):
    """Start a run: Launch is enabled only after a pre-flight of exactly these inputs passed.

    Nothing is typed back: the pre-flight is the plan (`plan`), and it holds only for the
    inputs it was run for (`checked`); enter never launches, it runs the pre-flight and then
    moves to the button that says what will start."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DIALOG_ID = "launch-dialog"
    ACT_VARIANT = "success"
    PLAN_BOX = "launch-verdict"
    PLAN_FAILED = ""
    RESULT_BOX = "launch-result"
    RUNNING = "starting…"
    #: a launch that failed can be checked and tried again
    RETRY = True
    #: one worker at a time: the pre-flight, or the launch
    PLAN_GROUP = RUN_GROUP = "launch"

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
        #: the inputs the last passing pre-flight was for
        self.checked: tuple[str, str, str | None] | None = None
        #: the inputs of the pre-flight or launch under way
        self.target: tuple[str, str, str | None] = ("", "", None)

    def title_text(self) -> str:
        if self.resume:
            return f"Resume {shown(self.resume.name)} on {self.host} from its newest checkpoint"
        return "Launch a training run"

    def compose_body(self) -> ComposeResult:
        hosts = [(h.name, h.name) for h in self.app.fleet.hosts]
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

    def compose_buttons(self) -> ComposeResult:
        yield Button("Pre-flight", id="preflight", variant="primary")

    def prepare(self) -> None:
        table = self.query_one("#launch-checks", DataTable)
        table.add_columns("Check", "", "Why")
        table.can_focus = False
        table.display = False  # an empty table's header means nothing until a pre-flight ran

    def focus_first_field(self) -> None:
        self.query_one("#launch-after" if self.resume else "#launch-toml", Input).focus()

    def checks_passed(self) -> bool:
        return self.checked is not None and self.checked == self.inputs()

    def act_label(self) -> str:
        """What the launch button does, exactly."""
        pre = self.plan
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

    def submitted(self, field: Input) -> None:
        # enter in a field runs the pre-flight; once it passed, focus moves to the button that
        # says what will start, so a second enter is a deliberate one
        if self.ready():
            self.query_one("#act", Button).focus()
        else:
            self.run_preflight()

    def on_select_changed(self) -> None:
        self.refresh_act()

    def pressed(self, button: Button) -> None:
        if button.id == "preflight":
            self.run_preflight()

    def show_checks(self, pre: Preflight) -> None:
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
        # no refusal is every check answered and passed (`Preflight.ok`)
        refusal = pre.refusal
        verdict = (
            Text("✔ every pre-flight check passed; Launch is enabled.\n", style="bold green")
            if refusal is None
            else Text(
                f"✖ refused ({said(refusal.name)}): {said(refusal.message)}\n",
                style="bold red",
            )
        )
        if est.get("memory_bytes"):
            verdict.append(
                f"estimate: {size_short(est['memory_bytes'])} of memory on {said(est.get('device', '?'))}, "
                f"{est.get('lora_params', '?'):,} LoRA parameters",
                style="dim",
            )
        self.query_one("#launch-verdict", Static).update(verdict)

    def run_preflight(self) -> None:
        """Ask the host every launch check of the inputs as entered; nothing is started."""
        host, toml, after = self.inputs()
        self.checked = None
        self.refresh_act()
        if not toml:
            self.notify(
                "Type the path of a RUN.toml first.",
                title="Launch",
                severity="warning",
                markup=False,
            )
            return
        self.query_one("#launch-verdict", Static).update(Text("running pre-flight…", style="dim"))
        self.target = (host, toml, after)
        self.gather()

    async def make_plan(self) -> Preflight:
        # deferred: actions.launch (its helper modules and the run config, ~50 ms at start-up)
        from fleetdeck.backend.actions.launch.main import preflight

        host, toml, after = self.target
        return await preflight(
            self.app.link(host), self.run_arg(toml), after=after, resume=self.resume is not None
        )

    def plan_failed(self, error: BaseException) -> None:
        self.app.report_error("Pre-flight", error)

    def show_plan(self, plan: Preflight) -> None:
        self.show_checks(plan)
        if plan.ok:
            self.checked = self.target
        self.refresh_act()
        if plan.ok:
            self.query_one("#act", Button).focus()

    async def run(self) -> LaunchResult:
        """Start (or queue) the run through the backend, which checks again and audits."""
        # deferred: actions.launch (its helper modules and the run config, ~50 ms at start-up)
        from fleetdeck.backend.actions.launch.main import launch

        self.target = host, toml, after = self.inputs()
        return await launch(
            self.app.link(host), self.run_arg(toml), after=after, resume=self.resume is not None
        )

    def failed_what(self) -> str:
        return "Launch"

    def show_result(self, report: LaunchResult) -> None:
        res, host = report, self.target[0]
        self.show_checks(res.preflight)
        out = self.query_one("#launch-result", Static)
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

    def summary(self, report: LaunchResult) -> Outcome:
        host = self.target[0]
        return Outcome(
            "launch", host, report.ok, f"{shown(report.run_path)} on {host}: {said(report.state)}"
        )
