"""What every pop-up shares, and the one base of the confirmations that change a host.

`Modal`: an error in its handlers opens the error window, esc closes it.
`TypedConfirmModal`: purge, remove schedule and mirror. Focus starts in the first field the
operator must fill; the action button is disabled until every check passed and every field
holds exactly what it must, and its label says exactly what it will do; enter in a field acts
only then (otherwise it moves to the next field still wrong, or says what does not match). The
body scrolls and the buttons are docked at the bottom, so they stay on screen at 80x24.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from fleetdeck.tui.widgets.guard import GuardedPump


class Modal(GuardedPump, ModalScreen):
    """Base of every pop-up: an error in its handlers opens the error window, esc closes it."""

    BINDINGS = [Binding("escape", "cancel", "Close")]

    def action_cancel(self) -> None:
        """Close the pop-up."""
        self.dismiss()


class TypedConfirmModal(Modal):
    """A confirmation whose fields (`Input.confirm`) must be typed back before it acts.

    Subclasses give `title_text`, `compose_body`, `expected` (the exact text a field needs),
    `checks_passed` (the host's checks), `act_label` and `act`; `result` is what closing
    returns. The action button has id `act`. The title and the button's label are shown as
    plain text, never markup: their host parts must already be escaped with `shown`.
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
    ACT_VARIANT = "error"

    result: object = None
    #: set once the action ran: the button stays disabled, Cancel becomes Close
    done = False

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

    def checks_passed(self) -> bool:
        """True when the host's checks allow the action."""
        return True

    def act_label(self) -> str:
        """What the action button does, exactly (sizes and counts included)."""
        return "Confirm"

    def act(self) -> None:
        """Perform the action (usually starts a worker)."""

    def prepare(self) -> None:
        """Called on mount before the focus is placed (Textual calls every class's `on_mount`
        in the MRO, so subclasses override this instead)."""

    def submitted(self, field: Input) -> None:
        """Enter in `field`: act when ready, else move to what is still missing."""
        if self.ready():
            self.act()
            return
        if field.has_class("confirm") and not self.matches(field):
            want = self.expected(field)
            self.notify(
                "does not match: type it exactly, character for character"
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
        label = self.act_label()
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
        self.focus_first_field()
        self.refresh_act()

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
        """Close; nothing happens unless the action already ran."""
        self.dismiss(self.result)

    def finished(self) -> None:
        """The action ran: its button stays disabled, Cancel becomes Close and takes focus."""
        self.done = True
        self.refresh_act()
        cancel = self.query_one("#cancel", Button)
        cancel.label = "Close"
        cancel.focus()
