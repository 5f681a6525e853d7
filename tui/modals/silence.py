"""The silence pop-up of the Alerts view (`s`): host, rule and subject prefilled from the
highlighted alert (any of them set to "any" widens it; the host alone is a maintenance window),
how long, and why. It adds the silence as `fleetdeck silence add` does
(`backend/monitor/silences.add_silence`: bounded, audited before it is saved), and closes with
the silence; a refusal is said in the pop-up and nothing changes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Select, Static

from fleetdeck.backend.actions.audit import AuditError
from fleetdeck.backend.fleet.alert_rules import RULES
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.silence_model import Silence, SilenceRefused
from fleetdeck.backend.monitor.silences import add_silence
from fleetdeck.show.fmt import message_text
from fleetdeck.tui.modals.modal import Modal

#: "any" in the host and rule fields
ANY = "*"
#: the lengths offered (the CLI's --for takes any within silences.FOR_MIN and FOR_MAX)
LENGTHS = (
    ("30 minutes", 1800.0),
    ("1 hour", 3600.0),
    ("2 hours", 7200.0),
    ("4 hours", 14400.0),
    ("8 hours", 28800.0),
    ("1 day", 86400.0),
    ("3 days", 3 * 86400.0),
    ("1 week", 7 * 86400.0),
)


class SilenceModal(Modal):
    """Silence alerts for a while: prefilled from an alert, refused in place when it cannot be."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self, host: str | None = None, rule: str | None = None, subject: str | None = None
    ) -> None:
        super().__init__()
        self.host, self.rule, self.subject = host, rule, subject
        self.result: Silence | None = None

    def compose(self) -> ComposeResult:
        hosts = [("any host", ANY)] + [(h.name, h.name) for h in self.app.fleet.hosts]
        rules = [("any rule", ANY)] + [(r, r) for r in RULES]
        with Vertical(classes="dialog", id="silence-dialog"):
            yield Label(
                "Silence alerts: they still show here, marked, but no hook hears of them until it ends",
                classes="title",
            )
            yield Label("Host (only a host: its maintenance window):")
            yield Select(
                hosts,
                id="silence-host",
                allow_blank=False,
                compact=True,
                value=self.host if self.host in {v for _, v in hosts} else ANY,
            )
            yield Label("Rule:")
            yield Select(
                rules,
                id="silence-rule",
                allow_blank=False,
                compact=True,
                value=self.rule if self.rule in RULES else ANY,
            )
            yield Label("Subject (exact, or a pattern with * ? [; empty: any subject):")
            # the subject as it is shown, escaped: a run folder's name never reaches the
            # terminal raw, and a silence matches the escaped form (silence_model.matches)
            yield Input(shown(self.subject or ""), id="silence-subject", compact=True)
            yield Label("For:")
            yield Select(
                [(n, v) for n, v in LENGTHS],
                id="silence-for",
                allow_blank=False,
                compact=True,
                value=7200.0,
            )
            yield Label("Why (required: shown beside every alert it holds):")
            yield Input(
                "", placeholder="e.g. disk swap on gx10", id="silence-comment", compact=True
            )
            yield Static(id="silence-said")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Silence", id="act", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#silence-comment", Input).focus()
        self.relabel()

    def act_label(self) -> str:
        """What the button does, in words: "Silence host-down on gx10 for 2 hours"."""
        f = self.fields()
        what = " ".join(x for x in (f["rule"], f["subject"]) if x) or "every alert"
        where = f" on {f['host']}" if f["host"] else " on every host"
        length = next((n for n, v in LENGTHS if v == f["duration"]), f"{f['duration']:.0f} s")
        return f"Silence {what}{where} for {length}"

    def relabel(self) -> None:
        """Keep the button's words in step with the fields."""
        button = self.query_one("#act", Button)
        if str(button.label) != (label := self.act_label()):
            button.label = Text(label)
            button.refresh(layout=True)

    def on_select_changed(self, _event: Select.Changed) -> None:
        self.relabel()

    def on_input_changed(self, _event: Input.Changed) -> None:
        self.relabel()

    def fields(self) -> dict:
        """What the pop-up holds now, as `add_silence` takes it."""
        host = self.query_one("#silence-host", Select).value
        rule = self.query_one("#silence-rule", Select).value
        return {
            "host": None if host == ANY else str(host),
            "rule": None if rule == ANY else str(rule),
            "subject": self.query_one("#silence-subject", Input).value or None,
            "duration": float(self.query_one("#silence-for", Select).value),  # type: ignore[arg-type]
            "comment": self.query_one("#silence-comment", Input).value,
        }

    def act(self) -> None:
        """Add the silence; close with it, or say why not and stay open."""
        said = self.query_one("#silence-said", Static)
        try:
            self.result = add_silence(**self.fields())
        except (SilenceRefused, AuditError) as e:
            said.update(
                message_text(f"Not silenced: {getattr(e, 'message', None) or e}", "bold red")
            )
            return
        self.dismiss(self.result)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter does what the button says once the reason is given; before that it goes to
        the reason's field."""
        event.stop()
        comment = self.query_one("#silence-comment", Input)
        if event.input is comment or comment.value.strip():
            self.act()  # an empty reason is refused by add_silence, in its own words
        else:
            comment.focus()
            self.query_one("#silence-said", Static).update(
                message_text(
                    "Say why first: the reason is shown beside every alert it holds.", "yellow"
                )
            )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "act":
            self.act()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


__all__ = ["ANY", "LENGTHS", "SilenceModal"]
