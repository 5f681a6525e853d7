"""Who holds a path (`w` in the Host view): the path typed (the highlighted run's, to start
with), the host asked through `find_holders` (purge's own in-use reader, as `fleetdeck holders`),
and each holder shown with what it holds, every host value escaped. A read: nothing changes."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from fleetdeck.backend.actions.holders import HoldersReport, find_holders
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.fmt import said
from fleetdeck.tui.modals.modal import Modal
from fleetdeck.tui.widgets.keyed_table import KeyedTable

COLUMNS = [("pid", "Pid"), ("user", "User"), ("how", "How"), ("file", "File"), ("cmd", "Command")]


def holder_rows(rep: HoldersReport) -> dict[str, tuple]:
    """The table's rows, keyed by pid and start time: every host value escaped."""
    rows = {}
    for h in rep.holders:
        more = len(h.uses) - 1 + h.more_uses
        file = shown(h.uses[0].file) if h.uses else "-"
        rows[f"{h.pid}:{h.start}"] = (
            Text(str(h.pid)),
            Text(shown(h.user)),
            Text(", ".join(dict.fromkeys(u.how for u in h.uses))),
            Text(file + (f" (+{more} more)" if more else "")),
            Text(shown(h.command or f"[{h.comm}]")),
        )
    return rows


def summary(rep: HoldersReport) -> Text:
    """One line: how many hold a file under the path, of how many processes read."""
    where = shown(rep.resolved)
    if not rep.holders:
        t = Text(
            f"No process holds a file under {where} ({rep.processes:,} processes read).",
            style="bold green",
        )
    else:
        n = len(rep.holders)
        t = Text(
            f"{n} process{'es' if n != 1 else ''} hold{'s' if n == 1 else ''} a file under {where} "
            f"({rep.processes:,} processes read).",
            style="bold",
        )
    if rep.unreadable:
        t.append(
            f"\n{len(rep.unreadable)} could not be read (another user's): their files are not seen.",
            style="yellow",
        )
    if not rep.complete:
        t.append(
            f"\nNot indexed whole ({rep.entries:,} entries: too many to walk, or a folder deeper than "
            "the walk goes, unreadable or gone while walked): files not indexed are matched by name only.",
            style="yellow",
        )
    return t


class HoldersModal(Modal):
    """Ask `host` who holds a file under a path; `path` is where the field starts."""

    def __init__(self, host: str, path: str = "") -> None:
        super().__init__()
        self.host = host
        self.path = path
        #: the last answer (None before one came, or when the host refused)
        self.report: HoldersReport | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="holders-dialog"):
            yield Label(Text(f"Who holds a path on {self.host}"), classes="title")
            yield Label(
                "A path on the host (absolute, or ~/...); enter asks. Open files, mappings and "
                "working folders under it count, as purge's in-use check reads them."
            )
            # the path as it is shown (escaped); asked as the path it stands for (`ask`)
            yield Input(
                shown(self.path), placeholder="/path/on/the/host", id="holders-path", compact=True
            )
            yield Static(id="holders-summary")
            yield KeyedTable(COLUMNS, id="holders-table", classes="auto")
            with Horizontal(classes="buttons"):
                yield Button("Close", id="close")
                yield Button(f"Ask {self.host} who holds it", id="act", variant="primary")

    def on_mount(self) -> None:
        # an empty table is no place to tab to: it becomes a stop once it lists holders
        self.query_one("#holders-table", KeyedTable).can_focus = False
        self.query_one("#holders-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.ask_typed()

    def ask_typed(self) -> None:
        """Ask about the path in the field (enter there, or the Ask button)."""
        value = self.query_one("#holders-path", Input).value
        if value.strip():  # asked as typed: `run-3 ` is not `run-3`
            # the escaped text it started with stands for the path it was opened on
            self.ask(self.path if self.path and value == shown(self.path) else value)
        else:
            self.query_one("#holders-summary", Static).update(
                Text("type a path on the host first", style="yellow")
            )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "act":
            self.ask_typed()
        else:
            self.dismiss(self.report)

    @work(exclusive=True, group="holders", exit_on_error=False)
    async def ask(self, path: str) -> None:
        box = self.query_one("#holders-summary", Static)
        table = self.query_one("#holders-table", KeyedTable)
        box.update(Text(f"asking {self.host}…", style="dim"))
        try:
            rep = await find_holders(self.app.link(self.host), path)
        except HostError as e:
            self.report = None
            table.sync({})
            table.can_focus = False
            box.update(Text(f"✖ {said(e.message)} ({said(e.code)})", style="bold red"))
            return
        self.report = rep
        rows = holder_rows(rep)
        table.sync(rows)
        table.can_focus = bool(rows)
        box.update(summary(rep))
