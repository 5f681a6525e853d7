"""The History view (`6`): one host's recorded GPU memory and utilisation, disks, losses and
answers over a window, as sparklines (the same lines `fleetdeck history` prints), from the poll
history the dashboard and `watch` keep. `[` / `]` change the host, `-` / `+` the window.

`c` picks one of the host's cards (again: the next, then back to the sparklines): the view then
shows that card's incident, the full-height plot `fleetdeck history HOST --gpu N --plot` prints,
its memory (`f`: utilisation, temperature, power) with the host's events on the same time axis."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.host.lib.units import duration_short
from fleetdeck.backend.monitor.history.incident import FIGURES, Incident, incident
from fleetdeck.backend.monitor.history.store import History, history_path
from fleetdeck.show.charts import collect, history_table
from fleetdeck.show.incident_plot import incident_plot
from fleetdeck.tui.views.base import ViewScreen

WINDOWS = (3600.0, 6 * 3600.0, 24 * 3600.0, 7 * 86400.0)
#: the database is read again at most this often (a poll every few seconds needs no more)
READ_EVERY = 10.0
PLOT_FIGURES = tuple(FIGURES)


class HistoryScreen(ViewScreen):
    """One host's history; `[` `]` host, `-` `+` window."""

    BINDINGS = [
        # the view's own line names these keys: the footer keeps q Quit in 80 columns
        Binding(
            "left_square_bracket", "host(-1)", "Prev host", show=False, tooltip="the previous host"
        ),
        Binding(
            "right_square_bracket", "host(1)", "Next host", show=False, tooltip="the next host"
        ),
        Binding(
            "minus",
            "window(-1)",
            "Shorter",
            show=False,
            tooltip="a shorter window (1h, 6h, 24h, 7d)",
        ),
        Binding("plus,equals_sign", "window(1)", "Longer", show=False, tooltip="a longer window"),
        Binding(
            "c",
            "card",
            "Card",
            show=False,
            tooltip="one card's incident plot (again: the next card)",
        ),
        Binding(
            "f",
            "figure",
            "Figure",
            show=False,
            tooltip="the incident plot's figure: memory, utilisation, temperature, power",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.host_index = 0
        self.window_index = 2
        self._read_at = 0.0
        self._key: tuple | None = None
        self.card: int | None = None  # the card whose incident is shown, or None: the sparklines
        self.figure_index = 0
        self._cards: list[int] = []  # the host's cards in the last chart read

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="history-body"):
            yield Static(id="history-chart")
            yield Static(id="history-help", classes="detail")

    @property
    def host(self) -> str | None:
        names = self.state.host_names
        return names[self.host_index % len(names)] if names else None

    def action_host(self, step: int) -> None:
        self.host_index += step
        self._read_at = 0.0
        self.refresh_view()

    def action_card(self) -> None:
        cards = self._cards
        if self.card is None:
            self.card = cards[0] if cards else None
        else:
            later = [c for c in cards if c > self.card]
            self.card = later[0] if later else None
        self._read_at = 0.0
        self.refresh_view()

    def action_figure(self) -> None:
        self.figure_index = (self.figure_index + 1) % len(PLOT_FIGURES)
        self._read_at = 0.0
        self.refresh_view()

    def action_window(self, step: int) -> None:
        self.window_index = max(0, min(len(WINDOWS) - 1, self.window_index + step))
        self._read_at = 0.0
        self.refresh_view()

    def refresh_view(self) -> None:
        host, window = self.host, WINDOWS[self.window_index]
        now = time.time()
        key = (host, window, self.size, self.card, self.figure_index)
        if key == self._key and now - self._read_at < READ_EVERY:
            return
        self._key, self._read_at = key, now
        chart = self.query_one("#history-chart", Static)
        help_line = self.query_one("#history-help", Static)
        help_line.update(
            Text(
                f"[ ] another host ({len(self.state.host_names)})   - + the window "
                f"({', '.join(duration_short(w) for w in WINDOWS)})   c a card's incident"
                + ("   f its figure" if self.card is not None else ""),
                style="dim",
            )
        )
        if host is None:
            chart.update(Text("No hosts.", style="dim"))
            return

        since = now - window
        width = max(10, min(160, self.size.width - 60))
        live = self.app.alert_watch.history if self.app.alert_watch.enabled else None
        if live is not None:
            # the dashboard's own recorder: its reads include the minute in progress, so the
            # first polls show at once rather than when their minute is written
            data = self._read(live, host, since, window, width, now)
        else:
            path = history_path()
            if not path.exists():
                chart.update(
                    Text(
                        f"No history yet: it is recorded while the dashboard or `fleetdeck watch` "
                        f"polls ({path}).",
                        style="dim",
                    )
                )
                return
            hist = History(path)
            try:
                data = self._read(hist, host, since, window, width, now)
            finally:
                hist.close()
            if hist.warnings:  # corrupt or unreadable: said so, never "Nothing recorded"
                chart.update(
                    Text(f"The history database {path} cannot be read ({hist.error}).", style="red")
                )
                return
        if isinstance(data, Incident):
            chart.update(incident_plot(data, max(6, self.size.height - 16)))
            return
        if not any(data.values()):
            chart.update(
                Text(
                    f"Nothing recorded for {host} in the last {duration_short(window)}.",
                    style="dim",
                )
            )
            return
        chart.update(history_table(data, host, window, width))

    def _read(self, hist, host: str, since: float, window: float, width: int, now: float):
        """The sparklines' chart, or the chosen card's `Incident` (its events from the history and
        the audit log) while one is chosen and recorded."""
        data = collect(hist, host, since, window, width)
        self._cards = sorted(
            {int(n.partition(":")[0]) for n in data.get("gpu", {}) if n.partition(":")[0].isdigit()}
        )
        if self.card is None:
            return data
        try:
            audit = read_audit()
        except OSError:
            audit = []  # an unreadable audit log: the plot without its records
        inc = incident(
            hist,
            host,
            self.card,
            PLOT_FIGURES[self.figure_index],
            since,
            now,
            max(10, min(400, self.size.width - 14)),
            audit,
        )
        return data if inc is None else inc
