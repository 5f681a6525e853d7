"""The Audit view: every action taken, newest first, from the append-only audit log."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.audit_text import describe
from fleetdeck.tui.views.base import ViewScreen
from fleetdeck.tui.widgets.keyed_table import KeyedTable

AUDIT_COLUMNS = {
    "time": "Time",
    "action": "Action",
    "host": "Host",
    "result": "Result",
    "user": "User",
    "what": "Details",
}


def audit_columns(width: int) -> list[tuple[str, str]]:
    """The Audit table's columns: below 100 columns the user goes (the detail pane names it)
    and the time is shortened, so that the details keep some room."""
    return [(k, v) for k, v in AUDIT_COLUMNS.items() if width >= 100 or k != "user"]


def short_time(iso: str) -> str:
    """`2026-12-01T01:25:26+0000` -> `12-01 01:25:26`; anything else as it is."""
    if len(iso) >= 19 and iso[4] == "-" and iso[10] == "T":
        return f"{iso[5:10]} {iso[11:19]}"
    return iso


class AuditScreen(ViewScreen):
    """The audit log, newest first; the highlighted entry shown in full below."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict] = []

    def compose_body(self) -> ComposeResult:
        self._columns = audit_columns(self.app.size.width)
        yield KeyedTable(self._columns, id="audit-table")
        yield Static(id="audit-detail", classes="detail")

    def on_resize(self) -> None:
        cols = audit_columns(self.size.width)
        if cols != self._columns:
            self._columns = cols
            self.query_one("#audit-table", KeyedTable).set_columns(cols)
            if self.ready:
                self.refresh_view()

    def refresh_view(self) -> None:
        self.records = read_audit()
        rows = {}
        keys = [k for k, _ in self._columns]
        # an append-only log: the line number is a stable key
        for i in range(len(self.records) - 1, -1, -1):
            rec = self.records[i]
            result = str(rec.get("result", ""))
            stamp = str(rec.get("time", ""))
            cells = {
                "time": shown(stamp if "user" in keys else short_time(stamp)),
                "action": shown(str(rec.get("action", ""))),
                "host": shown(str(rec.get("host") or "-")),
                "result": Text(
                    shown(result),
                    style="green"
                    if result in ("done", "verified", "acknowledged")
                    else "bold red"
                    if result in ("refused", "failed", "unverified")
                    else "",
                ),
                "user": shown(str(rec.get("user", ""))),
                "what": describe(rec, size_short)[0],
            }
            rows[str(i)] = tuple(cells[k] for k in keys)
        table = self.query_one("#audit-table", KeyedTable)
        table.sync(rows)
        self.show_detail()

    def show_detail(self) -> None:
        """The highlighted record in full."""
        table = self.query_one("#audit-table", KeyedTable)
        key = table.current_key
        detail = self.query_one("#audit-detail", Static)
        if key is None:
            detail.update(
                Text(table.none_matched("action") or "No actions recorded yet.", style="dim")
            )
            return
        rec = self.records[int(key)]
        summary, lines = describe(rec, size_short)
        t = Text()
        t.append(
            f"{shown(str(rec.get('time', '')))}  {shown(str(rec.get('action', '')))} on "
            f"{shown(str(rec.get('host') or '-'))}: {shown(str(rec.get('result', '')))}",
            style="bold",
        )
        t.append(f"  by {shown(str(rec.get('user', '?')))}\n", style="dim")
        t.append(summary)
        for line in lines:
            t.append(f"\n  {line}")
        detail.update(t)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()
