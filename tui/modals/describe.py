"""Describe (`d`), as k9s's: the raw source behind a row, escaped, scrollable and copyable.

A run: the row as the probe saw it, its `run.json` and an excerpt of its newest
`trainer_state.json`, and how its s/step and ETA are reckoned (the median of the last
`MEDIAN_STEPS` logged step times). A schedule: the row, and the line behind it with its file
and line number (a crontab, a cron file), a timer's unit file, an at job's script, a loop's
command line. A serving seat: its command line and flags, its endpoint and last check, then
its whole command line read from its process. A listed process (the Host view): its row, then
its whole command line. What the host holds is read with bounded,
read-only commands (`head -c`), each byte of it escaped (`shown`) before it is shown; a file
that cannot be read says why in its place.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Button, Label, TextArea

from fleetdeck.backend.fleet.models import Run, Schedule, run_json, schedule_json
from fleetdeck.backend.host.lib.procfs import start_ticks_of_stat
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.probe.run_progress import MEDIAN_STEPS
from fleetdeck.tui.modals.modal import Modal

#: how much of one file is read from the host
READ_LIMIT = 64 << 10
#: how many of trainer_state.json's log_history entries the excerpt keeps (the newest)
HISTORY_KEPT = 5

Section = tuple[str, str]


def row_json(doc: dict[str, Any]) -> str:
    """A row's JSON one key a line, each value compact (a loss series stays one line)."""
    lines = [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=True)}," for k, v in doc.items()]
    if lines:
        lines[-1] = lines[-1][:-1]
    return "\n".join(["{", *lines, "}"])


async def _head(link: Any, argv: list[str]) -> str:
    """The first READ_LIMIT bytes a read-only command prints on the host, escaped; or why not."""
    try:
        res = await link.run(argv, timeout=10, limit=READ_LIMIT + 1024)
    except Exception as e:
        return f"(could not be read: {shown(str(getattr(e, 'message', e)))})"
    if res.returncode != 0:
        why = (
            res.stderr.decode("utf-8", "replace").strip()
            if isinstance(res.stderr, bytes)
            else str(res.stderr)
        )
        return f"(could not be read: {shown(why) or f'exit {res.returncode}'})"
    data = res.stdout[:READ_LIMIT]
    text = "\n".join(shown(line) for line in data.decode("utf-8", "surrogateescape").split("\n"))
    return text + (
        f"\n… (the first {READ_LIMIT >> 10} KiB only)" if len(res.stdout) > READ_LIMIT else ""
    )


def _file(path: str) -> list[str]:
    return ["head", "-c", str(READ_LIMIT + 1), "--", path]


def trainer_excerpt(text: str) -> str:
    """trainer_state.json with its log_history cut to the newest HISTORY_KEPT entries."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, dict):
        return text
    history = doc.get("log_history")
    if isinstance(history, list) and len(history) > HISTORY_KEPT:
        doc = dict(
            doc,
            log_history=[
                f"... {len(history) - HISTORY_KEPT} earlier entries",
                *history[-HISTORY_KEPT:],
            ],
        )
    return json.dumps(doc, indent=1, ensure_ascii=True)


async def run_sources(link: Any, r: Run) -> list[Section]:
    """What is behind a run's row, read from its host."""
    out = [(f"{r.path}/run.json", await _head(link, _file(f"{r.path}/run.json")))]
    newest = max(
        (c for c in r.checkpoints if c.step is not None), key=lambda c: c.step or 0, default=None
    )
    where = (
        f"{newest.path}/trainer_state.json"
        if newest is not None
        else f"{r.path}/trainer_state.json"
    )
    raw = await _head(link, _file(where))
    out.append((f"{where} (log_history: the newest {HISTORY_KEPT})", trainer_excerpt(raw)))
    return out


def find_line(text: str, s: Schedule) -> str:
    """The lines of `text` that hold the schedule's command, each with its line number."""
    if text.startswith("(could not be read"):
        return text
    found = [
        f"{n}: {line}"
        for n, line in enumerate(text.split("\n"), 1)
        if s.command and shown(s.command) in line
    ]
    return "\n".join(found) or "(no line holds the command now: changed since the poll?)"


async def schedule_sources(link: Any, s: Schedule) -> list[Section]:
    """What is behind a schedule's row, read from its host."""
    if s.kind == "crontab":
        text = await _head(
            link,
            ["crontab", "-l"]
            if s.user in ("", link.host.user, None)
            else ["crontab", "-l", "-u", s.user],
        )
        return [(f"{s.source}: the line", find_line(text, s)), (s.source, text)]
    if s.kind == "cron-file":
        text = await _head(link, _file(s.source))
        return [(f"{s.source}: the line", find_line(text, s)), (s.source, text)]
    if s.kind == "systemd-timer" and s.unit:
        system = await _head(link, ["systemctl", "cat", "--no-pager", "--", s.unit])
        if system.startswith("(could not be read"):
            system = await _head(link, ["systemctl", "--user", "cat", "--no-pager", "--", s.unit])
        return [(f"systemctl cat {s.unit}", system)]
    if s.kind == "at" and s.unit:
        return [(f"at -c {s.unit}", await _head(link, ["at", "-c", s.unit]))]
    if s.kind == "loop" and s.pid:
        raw = await _head(link, _file(f"/proc/{s.pid}/cmdline"))
        return [
            (
                f"/proc/{s.pid}/cmdline (arguments one a line)",
                raw.replace("\\x00", "\n").rstrip("\n"),
            )
        ]
    return []


async def cmdline_sources(link: Any, pid: int, start: int | None, whose: str) -> list[Section]:
    """A process's whole command line read on the host (arguments one a line), when the pid is
    still that process (its start time, as the probe saw it)."""
    if start is not None:
        stat = await _head(link, _file(f"/proc/{pid}/stat"))
        # the host library's reading of the same file, not a second copy of its rule
        if start_ticks_of_stat(stat.encode("utf-8", "surrogateescape")) != start:
            return [
                (
                    "the whole command line",
                    f"(pid {pid} is not {whose} now: it ended since the poll)"
                    if not stat.startswith("(could not")
                    else stat,
                )
            ]
    raw = await _head(link, _file(f"/proc/{pid}/cmdline"))
    return [
        (
            f"the whole command line (/proc/{pid}/cmdline, arguments one a line)",
            raw.replace("\\x00", "\n").rstrip("\n"),
        )
    ]


async def seat_sources(link: Any, seat: Any) -> list[Section]:
    """A seat's whole command line, read from its process on the host."""
    if not seat.pid:
        return [
            (
                "the whole command line",
                "(no process the probe could see: a container's is its image's)",
            )
        ]
    return await cmdline_sources(link, seat.pid, seat.start_ticks, "the seat's process")


class DescribeModal(Modal):
    """The raw source behind a row: what the dashboard has, then what the host holds."""

    BINDINGS = [
        Binding("escape,q,d", "dismiss", "Close"),
        Binding("y", "copy", "Copy", tooltip="copy every line to the clipboard (y, as k9s)"),
    ]

    def __init__(
        self,
        title: str,
        known: list[Section],
        fetch: Callable[[], Awaitable[list[Section]]] | None = None,
    ) -> None:
        super().__init__()
        self.heading = title
        self.sections = list(known)
        self.fetch = fetch

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="describe"):
            yield Label(Text(self.heading), classes="title")
            yield Label(
                "↑ ↓ PgUp PgDn scroll; select with the mouse or y copies it all; esc closes",
                classes="detail",
            )
            yield TextArea(
                self.text(),
                read_only=True,
                show_line_numbers=False,
                id="describe-body",
                soft_wrap=False,
            )
            yield Button("Close", id="close", variant="primary")

    def text(self) -> str:
        """Every section, as shown (escaped) and as copied."""
        parts = []
        for heading, body in self.sections:
            head = shown(heading)  # a run folder's path, escaped as everywhere else
            parts.append(f"── {head} " + "─" * max(3, 60 - len(head)))
            parts.append(body)
            parts.append("")
        return "\n".join(parts)

    def on_mount(self) -> None:
        self.query_one("#describe-body").focus()
        if self.fetch is not None:
            self.sections.insert(0, ("from the host", "reading…"))
            self.query_one("#describe-body", TextArea).text = self.text()
            self.read_sources()

    @work(exclusive=True, group="describe", exit_on_error=False)
    async def read_sources(self) -> None:
        assert self.fetch is not None
        try:
            more = await self.fetch()
        except Exception as e:  # a down host must not break the pop-up
            more = [("from the host", f"(could not be read: {shown(str(e))})")]
        # what the host holds first: it is what was asked for; the row the dashboard has after
        self.sections = (more or [("from the host", "(nothing more behind this row)")]) + [
            s for s in self.sections if s[0] != "from the host"
        ]
        self.query_one("#describe-body", TextArea).text = self.text()

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.text())
        self.notify(
            "Copied to the clipboard (through the terminal).", title="Describe", markup=False
        )

    def on_button_pressed(self) -> None:
        self.dismiss()


#: how the Runs view's s/step and ETA are reckoned (backend/host/probe/run_progress.py)
STEP_TIME = "\n".join(
    [
        f"s/step (seconds_per_step) is the median of the last {MEDIAN_STEPS} steps' times (one slow step,",
        "a save or an eval, does not move it): each line of progress.jsonl gives its own step's time, else",
        "the time between two lines over the steps between them. Hugging Face's Trainer logs no step time:",
        "its runs' s/step is the time between the last two saves over the steps between them.",
        "The ETA is the steps left times that s/step; a stalled run has none.",
    ]
)


def describe_run(app: Any, r: Run) -> DescribeModal:
    """The Describe pop-up of a run."""
    known = [
        ("the row, as the probe saw it", row_json(run_json(r))),
        ("s/step and the ETA", STEP_TIME),
    ]
    return DescribeModal(
        f"Describe run {shown(r.name)} on {r.host}", known, lambda: run_sources(app.link(r.host), r)
    )


def describe_schedule(app: Any, s: Schedule) -> DescribeModal:
    """The Describe pop-up of a schedule."""
    known = [("the row, as listed", row_json(schedule_json(s)))]
    return DescribeModal(
        f"Describe {shown(s.kind)} {shown(s.id)} on {s.host}",
        known,
        lambda: schedule_sources(app.link(s.host), s),
    )


def describe_seat(app: Any, seat: Any, check: Any = None) -> DescribeModal:
    """The Describe pop-up of a serving seat: its command line and flags, the endpoint, the
    last check; then its whole command line read from the host."""
    from fleetdeck.tui.views.seats_panel import seat_sections

    known = [
        *seat_sections(seat, check),
        ("the row, as the probe saw it", row_json(seat.to_json())),
    ]
    return DescribeModal(
        f"Describe seat {shown(seat.name)} on {seat.host}",
        known,
        lambda: seat_sources(app.link(seat.host), seat),
    )


def describe_process(app: Any, host: str, p: Any) -> DescribeModal:
    """The Describe pop-up of a listed process: its row, then its whole command line read from
    the host while the pid is still that process (pid and start time)."""
    doc = dict(asdict(p), why=list(p.why))
    return DescribeModal(
        f"Describe process {p.pid} on {host}",
        [("the row, as the probe saw it", row_json(doc))],
        lambda: cmdline_sources(app.link(host), p.pid, p.start, "that process"),
    )


__all__ = [
    "DescribeModal",
    "cmdline_sources",
    "describe_process",
    "describe_run",
    "describe_seat",
    "describe_schedule",
    "find_line",
    "trainer_excerpt",
]
