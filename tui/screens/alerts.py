"""The Alerts view (`5`), and the dashboard's alert watch: rules judged on every live poll, the
terminal bell and a toast when one starts firing, a badge in the header while any fire.

The dashboard judges the same rules as `fleetdeck watch` (carrying on from its saved state, so
`since` agrees) but delivers no hook and saves nothing: hooks are the watcher's job, and two
deliverers would deliver twice. A recorded replay (tests, screenshots) is not judged unless
asked for (`AlertWatch.enabled`), since its times are not now.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from fleetdeck.backend.alerts import Alert, AlertConfig, load_engine
from fleetdeck.backend.models import FleetSnapshot
from fleetdeck.backend.seats import recorded_checks

from ..fmt import human_duration
from ..widgets.keyed_table import KeyedTable
from .base import ViewScreen

if TYPE_CHECKING:
    from ..app import FleetdeckApp

STATE_STYLE = {"firing": "bold red", "resolved": "green"}


class AlertWatch:
    """The dashboard's alert engine: `observe(snapshot)` after each poll."""

    def __init__(self, app: FleetdeckApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled
        self.engine = load_engine(app.fleet.alerts or AlertConfig())  # type: ignore[arg-type]
        self._base_subtitle: str | None = None

    @property
    def firing(self) -> list[Alert]:
        return self.engine.firing()

    def alerts(self) -> list[Alert]:
        """Firing first, then the recently resolved, newest first."""
        return self.engine.alerts()

    def observe(self, snap: FleetSnapshot) -> list[Alert]:
        """Judge the rules on one poll; ring and toast for each alert that starts firing."""
        if not self.enabled:
            return []
        transitions = self.engine.evaluate(snap, recorded_checks())
        fired = [a for a in transitions if a.state == "firing"]
        if fired:
            self.app.bell()
            for a in fired[:3]:
                self.app.notify(a.text, title=a.title, severity="warning", timeout=10)
            if len(fired) > 3:
                self.app.notify(f"and {len(fired) - 3} more: press 5", title="Alerts", severity="warning")
        self.show_badge()
        return transitions

    def show_badge(self) -> None:
        """`⚠ N alerts` after the header's subtitle while any fire."""
        if self._base_subtitle is None:
            self._base_subtitle = self.app.sub_title
        n = len(self.engine.m.firing)
        badge = f" · ⚠ {n} alert{'' if n == 1 else 's'}" if n else ""
        self.app.sub_title = self._base_subtitle + badge


class AlertsScreen(ViewScreen):
    """Every firing alert, then the recently resolved; the highlighted one in full below."""

    SHOWS_AGES = True

    def __init__(self) -> None:
        super().__init__()
        self.shown: dict[str, Alert] = {}

    def compose_body(self) -> ComposeResult:
        yield KeyedTable([("state", "State"), ("rule", "Rule"), ("host", "Host"), ("subject", "Subject"),
                          ("since", "Since"), ("text", "What")], id="alerts-table")
        yield Static(id="alerts-detail", classes="detail")

    def refresh_view(self) -> None:
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        alerts = watch.alerts() if watch is not None else []
        now = self.app.clock()
        self.shown = {f"{a.state}|{a.key}|{a.since}": a for a in alerts}
        rows = {k: (Text(a.state, style=STATE_STYLE.get(a.state, "")), a.rule, a.host, Text(a.subject),
                    human_duration(max(0.0, now - a.since)) + " ago", Text(a.text[:120]))
                for k, a in self.shown.items()}
        self.query_one("#alerts-table", KeyedTable).sync(rows)
        self.show_detail()

    def show_detail(self) -> None:
        """The highlighted alert in full."""
        key = self.query_one("#alerts-table", KeyedTable).current_key
        detail = self.query_one("#alerts-detail", Static)
        a = self.shown.get(key) if key is not None else None
        if a is None:
            detail.update(Text("No alerts. Rules and thresholds: the [alerts] table of the fleet file.",
                               style="dim"))
            return
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.since))
        detail.update(Text(f"{a.title}\n{a.state} since {when}\n\n{a.text}"))

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()
