"""The Proposals view: what agents proposed over `fleetdeck mcp`, who proposed it and why; a
person opens one in its action's own confirmation pop-up (after the plan was made again on the
host) or rejects it. Pure rows in `proposal_rows`, the store in `backend/actions/proposals.py`."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from fleetdeck.backend.actions.audit import AuditError, user
from fleetdeck.backend.actions.proposal_plans import Rejudged, rejudge
from fleetdeck.backend.actions.proposals import Proposal, ProposalError, ProposalStore
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal
from fleetdeck.tui.views.base import ViewScreen, show_text
from fleetdeck.tui.widgets.keyed_table import KeyedTable

COLUMNS = [
    ("id", "Id"),
    ("state", "State"),
    ("kind", "Action"),
    ("host", "Host"),
    ("by", "Proposed by"),
    ("why", "Why"),
]
STYLES = {
    "pending": "bold yellow",
    "done": "green",
    "failed": "bold red",
    "refused": "red",
    "abandoned": "bold red",
}


def proposer(p: Proposal) -> str:
    """Who proposed it: `mcp (client)`, escaped."""
    client = p.origin.get("client")
    via = shown(str(p.origin.get("via", "?")))
    return f"{via} ({shown(str(client))})" if client else via


def proposal_rows(found: list[Proposal], now: float) -> dict[str, tuple[Any, ...]]:
    """The table's rows by proposal id, newest first (a pure function of the proposals)."""
    states = {p.id: p.state_at(now) for p in found}  # once each: a claim's process is looked up
    return {
        p.id: (
            p.id,
            Text(states[p.id], style=STYLES.get(states[p.id], "dim")),
            p.kind,
            shown(p.host),
            proposer(p),
            shown(p.reason)[:200],
        )
        for p in found
    }


def detail_text(p: Proposal, now: float) -> Text:
    """The highlighted proposal in full: what, who, why, when, and how it ended."""
    t = Text()
    t.append(f"{shown(p.summary)}\n", style="bold")
    t.append(f"proposed by {proposer(p)}: {shown(p.reason)}\n")
    made = time.strftime("%Y-%m-%d %H:%M", time.localtime(p.created))
    ends = time.strftime("%Y-%m-%d %H:%M", time.localtime(p.expires))
    t.append(f"made {made}, expires {ends}; state {p.state_at(now)}\n", style="dim")
    t.append(f"arguments: {shown(json.dumps(p.args, ensure_ascii=True))}", style="dim")
    if p.outcome:
        o = p.outcome
        t.append(
            f"\noutcome: {shown(str(o.get('code')))}: {shown(str(o.get('message')))} "
            f"(by {shown(str(o.get('by')))})"
        )
    return t


class ProposalsScreen(ViewScreen):
    """Every kept proposal, newest first; `c` opens the highlighted one's confirmation, `x`
    rejects it."""

    BINDINGS = [
        Binding("c", "confirm", "Confirm", tooltip="judge it again on the host, then its pop-up"),
        Binding("x", "reject", "Reject", tooltip="turn the highlighted proposal down"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.store = ProposalStore()
        self.found: dict[str, Proposal] = {}
        #: the proposal whose pop-up is open (claimed `confirmed`) and that pop-up
        self.claimed: tuple[Proposal, Any] | None = None

    def compose_body(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="proposals-table")
        yield Static(id="proposals-detail", classes="detail")

    def on_unmount(self) -> None:
        """The dashboard quits with a pop-up open: its proposal is settled as it stands (one
        whose action is still running stays `confirmed`, as when the CLI is killed)."""
        if self.claimed is not None:
            p, modal = self.claimed
            if not modal.done or modal.result is not None:
                self.closed(p, modal, modal.result)

    def refresh_view(self) -> None:
        found = self.store.load()
        self.found = {p.id: p for p in found}
        self.query_one("#proposals-table", KeyedTable).sync(proposal_rows(found, time.time()))
        self.show_detail()

    def show_detail(self) -> None:
        """The highlighted proposal in full, and any file that could not be read."""
        table = self.query_one("#proposals-table", KeyedTable)
        key = table.current_key
        text = (
            detail_text(self.found[key], time.time())
            if key in self.found
            else Text(
                table.none_matched("proposal")
                or "No proposals: agents record them with `fleetdeck mcp`'s propose tools.",
                style="dim",
            )
        )
        for problem in self.store.problems:
            text.append(f"\nunreadable: {shown(problem)}", style="yellow")
        show_text(self.query_one("#proposals-detail", Static), text)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    @property
    def selected(self) -> Proposal | None:
        """The highlighted proposal, read again from its file."""
        key = self.query_one("#proposals-table", KeyedTable).current_key
        if key is None:
            return None
        try:
            return self.store.get(key)
        except ProposalError as e:
            self.notify(e.message, title="Proposal", severity="warning", markup=False)
            return None

    def settle(self, p: Proposal, state: str, code: str, message: str) -> Proposal | None:
        """Record how `p` moved on (audited with its origin) and return it as saved; a failure
        to record (or someone else having moved it first) is said, and None returned."""
        try:
            return self.store.settle(p, state, user(), code=code, message=message, via="dashboard")
        except (AuditError, ProposalError) as e:
            self.notify(str(e), title="Proposal", severity="error", markup=False)
            return None
        finally:
            self.refresh_view()

    def action_reject(self) -> None:
        """Turn the highlighted pending proposal down."""
        p = self.selected
        if p is None:
            return
        if p.state_at(time.time()) != "pending":
            self.notify(f"proposal {p.id} is {p.state_at(time.time())}", markup=False)
            return
        self.settle(p, "rejected", "rejected", "a person rejected it")
        self.notify(f"rejected proposal {p.id}", title="Proposal", markup=False)

    def action_confirm(self) -> None:
        """Judge the highlighted proposal again on the host, then open its confirmation."""
        p = self.selected
        if p is not None:
            self.notify(f"checking proposal {p.id} on {shown(p.host)} again…", markup=False)
            self.rejudge_worker(p)

    @work(exclusive=True, group="proposal", exit_on_error=False)
    async def rejudge_worker(self, p: Proposal) -> None:
        verdict = await rejudge(self.app.fleet, p, time.time())
        self.opened(p, verdict)

    def opened(self, p: Proposal, verdict: Rejudged) -> None:
        """Refuse a proposal that no longer stands (saying why), else open its pop-up."""
        if not verdict.ok:
            code, msg = verdict.code or "refused", verdict.message or "it no longer stands"
            if verdict.final and code != "settled":
                self.settle(p, "expired" if code == "expired" else "refused", code, msg)
            self.notify(
                f"{msg} [{code}]", title="Proposal refused", severity="warning", markup=False
            )
            return
        planned = verdict.planned
        assert planned is not None  # `ok` says the plan was made
        a = p.args
        if p.kind == "purge":
            keep = a.get("keep_newest") or None
            modal: Any = PurgeModal(p.host, list(a["paths"]), plan=planned.typed, keep=keep)
        elif p.kind == "remove-schedule":
            sched, check = planned.typed
            modal = RemoveScheduleModal(sched, check)
        elif p.kind == "mirror":
            src_host, src_path = str(a["src"]).split(":", 1)
            modal = MirrorModal(src_host, src_path, dst=tuple(str(a["dst"]).split(":", 1)))
        else:
            modal = LaunchModal(p.host, str(a["run_toml"]), str(a.get("after") or ""))
        modal.for_proposal = {"id": p.id, "origin": p.origin}
        # the claim, as the CLI makes it: while the pop-up is open no one else can carry it out
        claimed = self.settle(p, "confirmed", "confirmed", f"the {p.kind} pop-up opened")
        if claimed is None:
            return
        self.claimed = (claimed, modal)
        self.app.push_screen(modal, lambda result: self.closed(claimed, modal, result))

    def closed(self, claimed: Proposal, modal: Any, result: Any) -> None:
        """Its pop-up closed (or the dashboard quit): unused, the claimed proposal waits again;
        else it is done or failed as the action reported."""
        self.claimed = None
        if not modal.done:
            self.settle(claimed, "pending", "released", f"the {claimed.kind} pop-up closed unused")
            return
        ok = bool(getattr(result, "ok", False))
        word = "done" if ok else "failed"
        why = f"the {claimed.kind} pop-up: {word}"
        self.settle(claimed, word, word if ok else "action-failed", why)
