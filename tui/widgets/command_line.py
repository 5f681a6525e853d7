"""The `:` command line, as in k9s and vim: a view's name, a host's name, or both.

`:runs` shows the Runs view, `:runs h2` the Runs view of host h2 alone, `:host gx10` (or just
`:gx10`) the Host view of gx10, `:q` quits. Tab completes a view's or a host's name; what
names nothing is one sentence under the line, which stays open to be fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Input, Label

#: the views by the names the command line takes (and the short forms k9s users type)
VIEWS = {
    "fleet": "fleet",
    "runs": "runs",
    "schedules": "schedules",
    "audit": "audit",
    "alerts": "alerts",
    "history": "history",
    "proposals": "proposals",
    "host": "host",
}
ALIASES = {
    "sched": "schedules",
    "schedule": "schedules",
    "run": "runs",
    "alert": "alerts",
    "proposal": "proposals",
    "hosts": "fleet",
    "quit": "quit",
    "q": "quit",
    "help": "help",
}


@dataclass(frozen=True)
class Command:
    """What a command line asks for: a view (or quit/help), and a host, either may be None."""

    view: str | None
    host: str | None = None


def parse(line: str, hosts: Sequence[str]) -> Command:
    """The command `line` names, or ValueError with the sentence to show."""
    words = line.strip().lstrip(":").split()
    if not words:
        raise ValueError(
            "type a view (fleet, runs, schedules, audit, alerts, history) or a host's name"
        )
    if len(words) > 2:
        raise ValueError(f"one view and one host at most, not {len(words)} words")
    first = words[0].casefold()
    view = VIEWS.get(first) or ALIASES.get(first)
    by_case = {h.casefold(): h for h in hosts}
    if view is None:
        if first in by_case and len(words) == 1:
            return Command("host", by_case[first])
        raise ValueError(
            f"no such view or host: {words[0]!r} (views: {', '.join(v for v in VIEWS if v != 'host')}; "
            f"hosts: {', '.join(hosts) or 'none'})"
        )
    if len(words) == 1:
        if view == "host":
            raise ValueError(f"which host? :host NAME (hosts: {', '.join(hosts) or 'none'})")
        return Command(view)
    host = by_case.get(words[1].casefold())
    if host is None:
        raise ValueError(f"no such host: {words[1]!r} (hosts: {', '.join(hosts) or 'none'})")
    if view in ("quit", "help"):
        raise ValueError(f":{words[0]} takes no host")
    return Command(view, host)


def complete(line: str, hosts: Sequence[str]) -> str | None:
    """`line` with its last word completed to the one view or host name it starts (None when
    none, or when several do and they share no longer start)."""
    words = line.split(" ")
    last = words[-1].casefold()
    if not last and len(words) == 1:
        return None
    names = list(hosts) if len(words) > 1 else [*[v for v in VIEWS], *hosts]
    found = [n for n in names if n.casefold().startswith(last)]
    if not found:
        return None
    common = found[0]
    for n in found[1:]:
        while not n.casefold().startswith(common.casefold()):
            common = common[:-1]
    if len(common) <= len(last):
        return None
    return " ".join([*words[:-1], common])


class _Suggest(Suggester):
    def __init__(self, hosts: Sequence[str]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.hosts = list(hosts)

    async def get_suggestion(self, value: str) -> str | None:
        return complete(value, self.hosts)


class CommandLine(ModalScreen[Command | None]):
    """One line at the bottom: enter goes where it names, tab completes, esc closes."""

    DEFAULT_CSS = """
    CommandLine { align: left bottom; background: $background 0%; }
    CommandLine > Vertical { dock: bottom; height: auto; width: 100%; background: $panel; }
    CommandLine #cmd-line { height: 3; layout: horizontal; }
    CommandLine #cmd-line Label { padding: 1 0 0 1; width: auto; }
    CommandLine Input { width: 1fr; }
    CommandLine #cmd-why { padding: 0 1; color: $warning; height: auto; width: 100%; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close", tooltip="close the command line"),
        Binding("tab", "complete", "Complete", tooltip="complete a view's or a host's name"),
    ]

    def __init__(self, hosts: Sequence[str]) -> None:
        super().__init__()
        self.hosts = list(hosts)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("", id="cmd-why")
            with Horizontal(id="cmd-line"):
                yield Label(":")
                yield Input(
                    placeholder="runs, runs HOST, host HOST, schedules, alerts… (tab completes)",
                    suggester=_Suggest(self.hosts),
                    id="cmd-input",
                )

    def action_complete(self) -> None:
        field = self.query_one("#cmd-input", Input)
        done = complete(field.value, self.hosts)
        if done is not None:
            field.value = done + (" " if done.casefold() in VIEWS else "")
            field.cursor_position = len(field.value)

    def on_mount(self) -> None:
        self.query_one("#cmd-why", Label).display = False

    def on_input_changed(self) -> None:
        why = self.query_one("#cmd-why", Label)
        why.update("")
        why.display = False

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            cmd = parse(event.value, self.hosts)
        except ValueError as e:
            why = self.query_one("#cmd-why", Label)
            why.update(Text(str(e)))
            why.display = True
            return
        self.dismiss(cmd)

    def action_close(self) -> None:
        self.dismiss(None)


__all__ = ["Command", "CommandLine", "complete", "parse"]
