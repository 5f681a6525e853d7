"""The Alerts view (`5`): the alerts the dashboard's monitor judges (`tui/alert_watch.py`: the
bell, the toasts and the header's badge), firing first, the highlighted one in full below.

Below the alerts, the fleet's serving seats and each card's headroom, `c` checking the
highlighted seat on its host (`tui/views/seats_section.py`, a `SeatsSection` the view keeps).

Silences (`backend/monitor/silences.py`): `s` opens a pop-up prefilled from the highlighted
alert (`tui/modals/silence.py`), `e` expires the highlighted silence (of the silences table,
else the one over the highlighted alert). A silenced alert stays in the table, its state
`silenced` and its text saying by whom and until when; it neither rings nor toasts, and the
header's badge does not count it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from fleetdeck.backend.actions.audit import AuditError
from fleetdeck.backend.monitor.rules.alerts import Alert
from fleetdeck.backend.monitor.silence_model import Silence, SilenceRefused
from fleetdeck.backend.monitor.silences import expire_silence
from fleetdeck.show.fmt import alerts_title, said, since_text
from fleetdeck.tui.rows.alerts import SINCE, alert_cells, alert_detail, hhmm, silence_cells
from fleetdeck.tui.views.base import ViewScreen, show_text
from fleetdeck.tui.views.seats_section import SeatsSection
from fleetdeck.tui.widgets.keyed_table import KeyedTable

if TYPE_CHECKING:
    from fleetdeck.tui.alert_watch import AlertWatch


class AlertsScreen(ViewScreen):
    """Every firing alert, then the recently resolved; the highlighted one in full below; the
    seats and each card's headroom under them."""

    SHOWS_AGES = True
    SHOWS_ALERTS = True
    BINDINGS = [
        Binding(
            "c",
            "check_seat",
            "Check seat",
            tooltip="seats check on the highlighted seat: one completion with logprobs, "
            "sent from its host",
        ),
        Binding(
            "s",
            "silence",
            "Silence",
            tooltip="silence alerts like the highlighted one for a while (host, rule, subject, "
            "how long, why): they still show, marked, but no hook hears of them",
        ),
        # in the help screen (?) and the silences line, not the footer: 80 columns hold no more
        Binding(
            "d",
            "describe_seat",
            "Describe",
            show=False,
            tooltip="describe the highlighted seat: its whole command line and flags, the endpoint, "
            "the last check, escaped (y copies)",
        ),
        Binding(
            "e",
            "expire_silence",
            "Expire",
            show=False,
            tooltip="end the highlighted silence now (the silences table's, else the one over "
            "the highlighted alert): what it held is delivered",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.shown: dict[str, Alert] = {}
        #: the alerts table's rows as last given it (key -> cells)
        self._rows: dict[str, tuple] = {}
        #: what the rows were made from: the alerts and the ids of the silences in force
        self._made_from: tuple[list[Alert], list[str]] | None = None
        #: the seats table, the verdicts of its checks and the headroom bars
        self.seats = SeatsSection(self)

    def compose_body(self) -> ComposeResult:
        yield Static(id="alerts-title", classes="section")
        yield KeyedTable(
            [
                ("state", "State"),
                ("severity", "Severity"),
                ("rule", "Rule"),
                ("host", "Host"),
                ("subject", "Subject"),
                ("since", "Since"),
                ("text", "What"),
            ],
            id="alerts-table",
            column_sort=True,
        )
        yield Static(id="alerts-detail", classes="detail")
        yield Static(id="silences-title", classes="section")
        yield KeyedTable(
            [
                ("id", "Silence"),
                ("scope", "Silences"),
                ("until", "Until"),
                ("by", "By"),
                ("comment", "Why"),
            ],
            id="silences-table",
            classes="auto",
            column_sort=True,
        )
        yield Static("Seats and card headroom (c: check the highlighted seat)", classes="section")
        yield KeyedTable(
            [
                ("host", "Host"),
                ("seat", "Seat"),
                ("kind", "Kind"),
                ("port", "Port"),
                ("model", "Model"),
                ("gpus", "GPUs"),
                ("memory", "Memory"),
                ("check", "Last check"),
            ],
            id="seats-table",
            classes="auto",
            column_sort=True,
        )
        yield Static(id="seats-check", classes="detail")
        yield Static(id="seats-headroom", classes="detail")

    def refresh_view(self) -> None:
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        alerts = watch.alerts() if watch is not None else []
        if watch is not None:
            watch.silences.refresh()  # once, not once per alert
        # the rows are made from the alerts and the silences in force; a poll that left both as
        # they were moves only the ages, and only those on screen are made again
        made_from = (alerts, [s.id for s in watch.silences.active()] if watch is not None else [])
        if made_from == self._made_from:
            self.refresh_clock()
        else:
            self._made_from = made_from
            self.show_rows(watch, alerts)
        if watch is not None:
            watch.show_badge()  # a silence added or expired here changes what it counts
        self.show_detail()
        self.show_silences()
        self.seats.show()

    def show_rows(self, watch: AlertWatch | None, alerts: list[Alert]) -> None:
        """Every alert's row, and the title that counts them."""
        now = self.app.clock()
        # firing by severity (critical first), then newest first; then the resolved, newest first
        self.shown = {f"{a.state}|{a.key}|{a.since}": a for a in alerts}
        rows = {}
        held = 0
        for k, a in self.shown.items():
            s = watch.silence_of(a, read=False) if watch is not None else None
            held += s is not None
            rows[k] = alert_cells(a, s, now)
        show_text(
            self.query_one("#alerts-title", Static),
            alerts_title(alerts) + (f" ({held} silenced)" if held else ""),
        )
        self.query_one("#alerts-table", KeyedTable).sync(rows)
        self._rows = rows

    def refresh_clock(self) -> None:
        """A second later only the `since` cells move: those of the alerts on screen are made
        again, and the table is given them only when one reads otherwise (the rows, the detail,
        the silences and the seats wait for the next poll)."""
        table = self.query_one("#alerts-table", KeyedTable)
        rows, now, moved = self._rows, self.app.clock(), {}
        for key in table.keys_on_screen():
            a, cells = self.shown.get(key), rows.get(key)
            if a is not None and cells is not None:
                since = since_text(a.since, now)
                if cells[SINCE] != since:
                    moved[key] = (*cells[:SINCE], since, *cells[SINCE + 1 :])
        if moved:
            # the rows not on screen are handed back as they were: the table skips them
            self._rows = {k: moved.get(k, cells) for k, cells in rows.items()}
            table.sync(self._rows)

    def show_silences(self) -> None:
        """The silences in force, ending soonest first (hidden when there is none)."""
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        active: list[Silence] = []
        if watch is not None:
            watch.silences.refresh()
            active = watch.silences.active()
        rows = {s.id: silence_cells(s) for s in active}
        table = self.query_one("#silences-table", KeyedTable)
        table.sync(rows)
        table.display = bool(rows)
        none = table.none_matched("silence")
        show_text(
            self.query_one("#silences-title", Static),
            none
            if none
            else f"Silences: {len(rows)} in force (e: expire the highlighted one; s: add one)"
            if rows
            else "No silences (s: silence alerts like the highlighted one)",
        )

    def show_detail(self) -> None:
        """The highlighted alert in full."""
        key = self.query_one("#alerts-table", KeyedTable).current_key
        detail = self.query_one("#alerts-detail", Static)
        a = self.shown.get(key) if key is not None else None
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        who = watch.delivery() if watch is not None else None
        none = self.query_one("#alerts-table", KeyedTable).none_matched("alert")
        if a is None and none:
            text = Text(none, style="dim")
        elif a is None:
            text = Text(
                "No alerts. Rules and thresholds: the [alerts] table of the fleet file.",
                style="dim",
            )
        else:
            text = alert_detail(a, watch.silence_of(a) if watch is not None else None)
        if who:
            text.append(f"\n{who}", style="dim")
        detail.update(text)

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def on_keyed_table_choice_changed(self, event: KeyedTable.ChoiceChanged) -> None:
        # a filter that lets no row through moves no cursor: the lines under the tables say it
        if event.table.id == "alerts-table":
            self.show_detail()
        elif event.table.id == "silences-table":
            self.show_silences()
        elif event.table.id == "seats-table":
            self.seats.show()

    # -- seats (tui/views/seats_section.py) -------------------------------------------------------
    def action_describe_seat(self) -> None:
        """`d`: the raw facts behind the highlighted seat."""
        self.seats.describe()

    def action_check_seat(self) -> None:
        """`c`: check the highlighted seat on its host."""
        if (seat := self.seats.to_check()) is not None:
            self.check(*seat)

    @work(group="seat-check", exit_on_error=False)
    async def check(self, host: str, port: int) -> None:
        """Check one seat from its host (`SeatsSection.check`)."""
        await self.seats.check(host, port)

    # -- silences ---------------------------------------------------------------------------------
    def highlighted(self) -> Alert | None:
        key = self.query_one("#alerts-table", KeyedTable).current_key
        return self.shown.get(key) if key is not None else None

    def action_silence(self) -> None:
        """`s`: the silence pop-up, prefilled from the highlighted alert."""
        from fleetdeck.tui.modals.silence import SilenceModal

        a = self.highlighted()
        modal = SilenceModal(a.host, a.rule, a.subject) if a is not None else SilenceModal()
        self.app.push_screen(modal, callback=self._silenced)

    def _silenced(self, s: Silence | None) -> None:
        if s is None:
            return
        self.app.notify(
            said(f"{s.scope} until {hhmm(s.ends)}: {s.comment}"),
            title=f"Silenced ({s.id})",
            markup=False,
        )
        self.refresh_view()

    def action_expire_silence(self) -> None:
        """`e`: end the highlighted silence now (the silences table's when it has the focus, else
        the one over the highlighted alert, else the silences table's highlighted row)."""
        table = self.query_one("#silences-table", KeyedTable)
        watch: AlertWatch | None = getattr(self.app, "alert_watch", None)
        a = self.highlighted()
        over = watch.silence_of(a) if watch is not None and a is not None else None
        sid = table.current_key if self.focused is table or over is None else over.id
        if sid is None:
            self.app.notify(
                "No silence to expire: none is in force.", title="Silences", severity="warning"
            )
            return
        try:
            s = expire_silence(sid)
        except (SilenceRefused, AuditError) as e:
            self.app.notify(
                said(getattr(e, "message", None) or str(e)),
                title="Not expired",
                severity="warning",
                markup=False,
            )
            return
        self.app.notify(
            said(f"{s.scope}: what it held is delivered by the running watch."),
            title=f"Expired {s.id}",
            markup=False,
        )
        self.refresh_view()
