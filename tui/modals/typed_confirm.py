"""The one template of the confirmations that change a host: gather, type back, run, say.

`TypedConfirmModal`: purge, remove schedule, mirror, stop, and launch (whose plan is the
pre-flight and which has nothing to type back: the pre-flight holds only for the inputs it
checked). It gathers the plan in a worker
(`make_plan`, shown by `show_plan`), keeps the action button disabled until every check passed
and every field (`Input.confirm`) holds exactly what it must, runs the action in a worker
(`run`, shown by `show_result`), says a failure the same way everywhere, and posts the action's
`Outcome` as `ActionFinished`. Focus starts in the first field the operator must fill; the
button's label says exactly what it will do; enter in a field acts only when all of that holds
(otherwise it moves to the next field still wrong, or says what does not match). The body
scrolls and the buttons are docked at the bottom, so they stay on screen at 80x24.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static
from textual.widgets.button import ButtonVariant

from fleetdeck.backend.actions.audit import FOR_PROPOSAL
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import said
from fleetdeck.tui.messages import ActionFinished
from fleetdeck.tui.modals.modal import Modal

#: what the host was asked for first (a plan, a check, a dry run)
PlanT = TypeVar("PlanT")
#: what the action reported
ReportT = TypeVar("ReportT")


def mismatch(typed: str, want: str, n: int, of: int) -> str:
    """Which field differs and where: "field 2 of 5 (for .../checkpoint-50) differs at character
    31: typed '4', expected '5'" (host text escaped, so a control byte reads as itself)."""
    at = next(
        (i for i, (a, b) in enumerate(zip(typed, want, strict=False)) if a != b),
        min(len(typed), len(want)),
    )
    got = f"'{shown(typed[at])}'" if at < len(typed) else "nothing more"
    exp = f"'{shown(want[at])}'" if at < len(want) else "nothing more"
    where = want if len(want) <= 60 else "…" + want[-59:]
    return (
        f"field {n} of {of} (for {shown(where)}) differs at character {at + 1}: "
        f"typed {got}, expected {exp}; type it exactly, character for character"
    )


@dataclass(frozen=True)
class Outcome:
    """How an action ended, as the dashboard says it: posted as `ActionFinished`."""

    action: str
    host: str | None
    ok: bool
    summary: str

    def message(self) -> ActionFinished:
        """The message the screens re-read their state on."""
        return ActionFinished(self.action, self.host, self.ok, self.summary)


def failure(error: BaseException) -> str:
    """What went wrong, as a dialog says it: the host's own message, else the exception."""
    return said(getattr(error, "message", None) or error)


class TypedConfirmModal(Modal, Generic[PlanT, ReportT]):
    """A confirmation whose fields (`Input.confirm`) must be typed back before it acts.

    Subclasses give `title_text`, `compose_body`, `expected` (the exact text a field needs),
    `checks_passed` (the host's checks), `act_label`, and the action: `make_plan` /
    `show_plan` when the host is asked first, `run` / `show_result` / `summary` for the action
    itself. `plan` is the last plan gathered, `result` (also `report`) what the action
    reported and what closing returns. The action button has id `act`. The title and the
    button's label are shown as plain text, never markup: their host parts must already be
    escaped with `shown`.
    """

    BINDINGS = [
        Binding(
            "escape",
            "cancel",
            "Cancel",
            tooltip="cancel and close (nothing changes unless the action already ran)",
        )
    ]
    DIALOG_ID = "confirm-dialog"
    ACT_VARIANT: ClassVar[ButtonVariant] = "error"
    #: the Static in which a failure to gather the plan is said, and what precedes the reason
    PLAN_BOX = "plan"
    PLAN_FAILED = "could not gather the plan"
    #: the Static in which the action's progress, report or failure is said
    RESULT_BOX = "result"
    #: what RESULT_BOX says while the action runs
    RUNNING = "working…"
    #: True: a failed action can be tried again; False: its button stays disabled
    RETRY = False
    #: the worker groups (exclusive: a newer plan or action replaces one still running)
    PLAN_GROUP = "plan"
    RUN_GROUP = "run"

    plan: PlanT | None = None
    result: ReportT | None = None
    #: set once the action started: the button stays disabled, Cancel becomes Close at its end
    done = False
    #: the proposal this pop-up carries out (`{"id", "origin"}`), or None: every audit record
    #: the action writes then names it as `for_proposal`
    for_proposal: dict[str, Any] | None = None

    # -- what a subclass says ---------------------------------------------------------------
    def title_text(self) -> str:
        """The dialog's title."""
        return ""

    def compose_body(self) -> ComposeResult:
        """The plan, checks and fields (the fields as `Input(classes="confirm")`)."""
        yield from ()

    def compose_buttons(self) -> ComposeResult:
        """Buttons between Cancel and the action button."""
        yield from ()

    def expected(self, field: Input) -> str | None:
        """The exact text `field` must hold; None: any non-empty text."""
        return None

    def memory_key(self) -> tuple | None:
        """What this confirmation confirms (host, paths, ...): what was typed is kept under it
        when esc closes the pop-up, and is there again when the same pop-up is opened for the
        same thing. None: nothing is kept."""
        return None

    def checks_passed(self) -> bool:
        """True when the host's checks allow the action."""
        return True

    def act_label(self) -> str:
        """What the action button does, exactly (sizes and counts included)."""
        return "Confirm"

    def act(self) -> None:
        """Perform the action: by default `run` in a worker."""
        self.execute()

    def prepare(self) -> None:
        """Called on mount before the focus is placed (Textual calls every class's `on_mount`
        in the MRO, so subclasses override this instead)."""

    async def make_plan(self) -> PlanT:
        """Ask the host what the action would do (nothing changes)."""
        raise NotImplementedError

    def show_plan(self, plan: PlanT) -> None:
        """Show the plan just gathered (`self.plan` already holds it)."""

    def plan_failed(self, error: BaseException) -> None:
        """After the failure to gather a plan was said in PLAN_BOX."""
        self.refresh_act()

    def starting(self) -> None:
        """The action is about to run: by default RUNNING in RESULT_BOX."""
        self.query_one(f"#{self.RESULT_BOX}", Static).update(Text(self.running(), style="dim"))

    def running(self) -> str:
        """What RESULT_BOX says while the action runs."""
        return self.RUNNING

    async def run(self) -> ReportT:
        """Perform the action through the backend (which checks again and audits)."""
        raise NotImplementedError

    def show_result(self, report: ReportT) -> None:
        """Show what the action reported (`self.result` already holds it)."""

    def summary(self, report: ReportT) -> Outcome:
        """What the dashboard is told once the action ended."""
        raise NotImplementedError

    def failed_what(self) -> str:
        """What failed, for the error toast or window (`App.report_error`)."""
        return self.title_text()

    def run_failed(self) -> None:
        """After the action's failure was said in RESULT_BOX."""

    def submitted(self, field: Input) -> None:
        """Enter in `field`: act when ready, else move to what is still missing."""
        if self.ready():
            self.act()
            return
        if field.has_class("confirm") and not self.matches(field):
            want = self.expected(field)
            self.notify(
                mismatch(field.value, want, self.fields.index(field) + 1, len(self.fields))
                if want
                else "type a value first",
                title="Not confirmed",
                severity="warning",
                markup=False,
            )
        elif self.done:
            self.query_one("#cancel", Button).focus()
        elif not self.checks_passed():
            self.notify(
                f"{self.act_label()} is not possible: the checks above did not pass.",
                title="Refused",
                severity="warning",
                markup=False,
            )
        else:
            self.focus_first_field()

    def pressed(self, button: Button) -> None:
        """A button other than Cancel and the action button."""

    # -- shared behaviour -------------------------------------------------------------------
    @property
    def report(self) -> ReportT | None:
        """What the action reported (None until it ran)."""
        return self.result

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id=self.DIALOG_ID):
            yield Label(Text(self.title_text()), classes="title")
            yield from self.compose_body()
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield from self.compose_buttons()
                yield Button(
                    Text(self.act_label()), id="act", variant=self.ACT_VARIANT, disabled=True
                )

    def show_or_gather(self) -> None:
        """Show the plan given when the modal was opened, else gather one."""
        if self.plan is None:
            self.gather()
        else:
            self.show_plan(self.plan)

    def gather(self) -> None:
        """Gather the plan in a worker: polling and navigation go on meanwhile."""
        self.run_worker(self._gather(), group=self.PLAN_GROUP, exclusive=True, exit_on_error=False)

    async def _gather(self) -> None:
        box = self.query_one(f"#{self.PLAN_BOX}", Static)
        try:
            plan = await self.make_plan()
        except Exception as e:
            why = f"{self.PLAN_FAILED}: " if self.PLAN_FAILED else ""
            box.update(Text(f"✖ {why}{failure(e)}", style="bold red"))
            self.plan_failed(e)
            return
        self.plan = plan
        self.show_plan(plan)

    def execute(self) -> None:
        """Run the action in a worker; nothing else starts it."""
        self.run_worker(self._execute(), group=self.RUN_GROUP, exclusive=True, exit_on_error=False)

    async def _execute(self) -> None:
        self.done = True
        self.refresh_act()
        self.starting()
        box = self.query_one(f"#{self.RESULT_BOX}", Static)
        # set inside the worker's own task (its context is a copy): only this action sees it
        acting_for = FOR_PROPOSAL.set(self.for_proposal)
        try:
            report = await self.run()
        except Exception as e:
            box.update(Text(f"✖ {failure(e)}", style="bold red"))
            self.app.report_error(self.failed_what(), e)
            if self.RETRY:
                self.done = False
            self.run_failed()
            return
        finally:
            FOR_PROPOSAL.reset(acting_for)
        self.result = report
        self.show_result(report)
        self.finished()
        self.app.post_message(self.summary(report).message())

    @property
    def fields(self) -> list[Input]:
        """The fields to type back, in order."""
        return list(self.query("Input.confirm").results(Input))

    def matches(self, field: Input) -> bool:
        """True when `field` holds what it must."""
        want = self.expected(field)
        return bool(field.value) if want is None else field.value == want

    def ready(self) -> bool:
        """Every check passed, every field matches, and the action has not run yet."""
        return not self.done and self.checks_passed() and all(self.matches(f) for f in self.fields)

    def refresh_act(self) -> None:
        """Enable (or not) and relabel the action button."""
        button = self.query_one("#act", Button)
        button.disabled = not self.ready()
        # once it ran, the button no longer offers what it did: the result box says how it went
        label = self.act_label() if not self.done else "Working…" if self.result is None else "Done"
        if str(button.label) != label:
            button.label = Text(label)
            button.refresh(layout=True)  # a longer label must widen the button, not be cut
        # a plan that arrives after focus went to a field pushes the field down, at 80x24 out
        # of the dialog: bring it back, so the operator sees where the typing goes (a refused
        # plan is left at its top, where the refusal is said)
        if self.checks_passed() and isinstance(focused := self.focused, Input):
            self.call_after_refresh(focused.scroll_visible, animate=False)

    def on_mount(self) -> None:
        self.prepare()
        self.restore_typed()
        self.focus_first_field()
        self.refresh_act()

    def restore_typed(self) -> None:
        """Fill in what was typed before esc closed this pop-up for the same thing."""
        key = self.memory_key()
        kept = self.app.typed_memory.pop(key, None) if key is not None else None
        back = 0
        for field in self.query(Input).results(Input):
            if kept and field.id in kept and not field.value:
                field.value = kept[field.id]
                back += 1
                if field.has_class("confirm"):
                    field.set_class(self.matches(field), "typed-ok")
        if back:
            self.notify(
                f"What you typed before esc is back in {back} field{'s' if back != 1 else ''}: "
                "read it again; the host checks everything afresh.",
                title="Kept",
                markup=False,
            )

    def keep_typed(self) -> None:
        """Closing with esc: keep what was typed (the newest 16 pop-ups' worth)."""
        key = self.memory_key()
        typed = {str(f.id): f.value for f in self.query(Input).results(Input) if f.id and f.value}
        memory = self.app.typed_memory
        if key is None or self.done or not typed:
            return
        memory[key] = typed
        while len(memory) > 16:
            del memory[next(iter(memory))]

    def focus_first_field(self) -> None:
        """Focus the first field still wrong (else the first field, else Cancel)."""
        fields = self.fields
        wrong = [f for f in fields if not self.matches(f)]
        target = wrong[0] if wrong else (fields[0] if fields else self.query_one("#cancel", Button))
        target.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.has_class("confirm"):
            event.input.set_class(self.matches(event.input), "typed-ok")
        self.refresh_act()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submitted(event.input)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "act":
            if self.ready():
                self.act()
        elif event.button.id == "cancel":
            self.action_cancel()
        else:
            self.pressed(event.button)

    def action_cancel(self) -> None:
        """Close; nothing happens unless the action already ran. What was typed is kept."""
        self.keep_typed()
        self.dismiss(self.result)

    def finished(self) -> None:
        """The action ran: its button stays disabled, Cancel becomes Close and takes focus."""
        self.done = True
        self.refresh_act()
        cancel = self.query_one("#cancel", Button)
        cancel.label = "Close"
        cancel.focus()
