"""The Audit view: every action taken, newest first, from the append-only audit log."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from fleetdeck.backend.state import describe, read_audit

from ..fmt import human_bytes
from ..widgets.keyed_table import KeyedTable
from .base import ViewScreen


class AuditScreen(ViewScreen):
    """The audit log, newest first; the highlighted entry shown in full below."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict] = []

    def compose_body(self) -> ComposeResult:
        yield KeyedTable([("time", "Time"), ("action", "Action"), ("host", "Host"),
                          ("result", "Result"), ("user", "User"), ("what", "Details")], id="audit-table")
        yield Static(id="audit-detail", classes="detail")

    def refresh_view(self) -> None:
        self.records = read_audit()
        rows = {}
        # an append-only log: the line number is a stable key
        for i in range(len(self.records) - 1, -1, -1):
            rec = self.records[i]
            result = str(rec.get("result", ""))
            rows[str(i)] = (str(rec.get("time", "")), str(rec.get("action", "")), str(rec.get("host") or "-"),
                            Text(result, style="green" if result in ("done", "verified", "acknowledged")
                                 else "bold red" if result in ("refused", "failed", "unverified") else ""),
                            str(rec.get("user", "")), describe(rec, human_bytes)[0])
        table = self.query_one("#audit-table", KeyedTable)
        table.sync(rows)
        self.show_detail()

    def show_detail(self) -> None:
        """The highlighted record in full."""
        key = self.query_one("#audit-table", KeyedTable).current_key
        detail = self.query_one("#audit-detail", Static)
        if key is None:
            detail.update(Text("No actions recorded yet.", style="dim"))
            return
        rec = self.records[int(key)]
        summary, lines = describe(rec, human_bytes)
        t = Text()
        t.append(f"{rec.get('time', '')}  {rec.get('action', '')} on {rec.get('host') or '-'}: "
                 f"{rec.get('result', '')}", style="bold")
        t.append(f"  by {rec.get('user', '?')}\n", style="dim")
        t.append(summary)
        for line in lines:
            t.append(f"\n  {line}")
        detail.update(t)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

