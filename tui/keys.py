"""The keys that work everywhere in the dashboard: the app's own bindings, in a module of their
own so that help can list them without importing the app (which imports help)."""

from __future__ import annotations

from textual.binding import Binding

APP_BINDINGS: list[Binding] = [
    Binding("1", "view('fleet')", "Fleet", tooltip="Fleet view: every host"),
    Binding("2", "view('runs')", "Runs", tooltip="Runs view: every training run"),
    Binding(
        "3",
        "view('schedules')",
        "Schedules",
        tooltip="Schedules view: cron entries, timers, at jobs, loops",
    ),
    Binding("4", "view('audit')", "Audit", tooltip="Audit view: every action taken"),
    Binding("5", "view('alerts')", "Alerts", tooltip="Alerts view: firing and resolved alerts"),
    Binding(
        "6",
        "view('history')",
        "History",
        show=False,
        tooltip="History view: a host's GPU memory, disks and losses over hours and days",
    ),
    Binding(
        "7",
        "view('proposals')",
        "Proposals",
        show=False,
        tooltip="Proposals view: actions agents proposed, to confirm or reject",
    ),
    Binding("n", "launch", "Launch", tooltip="launch a run (pre-flight first)"),
    Binding("g", "poll_now", "Poll", show=False, tooltip="poll every host now"),
    Binding("t", "toggle_theme", "Theme", show=False, tooltip="toggle light / dark theme"),
    Binding("question_mark", "help", "Help", tooltip="this help"),
    Binding("q", "quit", "Quit", tooltip="quit"),
    Binding(
        "escape",
        "back",
        "Back",
        show=False,
        tooltip="back the way you came: the view before this one (at the first: Fleet)",
    ),
    Binding(
        "colon",
        "command_line",
        "Command",
        show=False,
        tooltip="command line: a view and a host by name (:runs h2, :host gx10, :q); tab completes",
    ),
]
