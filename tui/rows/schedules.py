"""The Schedules view's rows: a schedule's cells (`schedule_cells`), the row folding a host's
distribution entries (`folded_cells`), and the line under the table (`schedule_detail`)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.host.lib.text import shown

#: row key prefix of a host's folded distribution entries (never a schedule id: ids hold no "/")
FOLDED = "\x00system/"

#: the reasons in a few words, for a narrow terminal (the line under the table has the sentence)
SHORT_REASONS = {
    "dead-target": "path missing",
    "duplicate": "duplicate",
    "unacknowledged": "not acked",
}


def short_why(s: Schedule) -> str:
    """Why `s` is stray in a few words (`path missing, duplicate`), or `system` / `acked`."""
    if s.system:
        return "system"
    if not s.stray:
        return "acknowledged"
    shown_reasons = [r for r in s.reasons if r != "unacknowledged"] or list(s.reasons)
    return ", ".join(SHORT_REASONS.get(r, r) for r in shown_reasons)


def schedule_key(s: Schedule) -> str:
    """Fleet-wide row key: schedule ids are stable per host."""
    return f"{s.host}/{s.id}"


def folded_cells(n: int, host: str, columns: Iterable[str]) -> tuple:
    """The cells of the row folding the `n` entries the distribution installed on a host
    (`host`: its name as the table shows it), for the column keys `columns`."""
    dim = Text(
        f"{n} entr{'y' if n == 1 else 'ies'} the distribution installed (s lists them)",
        style="dim",
    )
    cells = {
        "flag": Text("·", style="dim"),
        "host": host,
        "kind": Text("system", style="dim"),
        "why": Text("installed by the distribution", style="dim"),
        "user": "",
        "spec": "",
        "cmd": dim,
    }
    return tuple(cells[k] for k in columns)


def schedule_cells(s: Schedule, why: str, host: str, columns: Iterable[str]) -> tuple:
    """The cells of schedule `s` for the column keys `columns`; `why`: why it is stray (or
    `short_why`'s words), `host`: its host's name as the table shows it."""
    style = "bold red" if s.stray else ("dim" if not s.active or s.system else "")
    flag = "⚠" if s.stray else ("·" if s.system else " ")
    cells = {
        "flag": Text(flag, style="bold red" if s.stray else "dim"),
        "host": host,
        # `why` names the missing path as the host's command gave it: escaped here
        "kind": shown(s.kind),
        "why": Text(shown(why), style=style or "green"),
        "user": shown(s.user),
        "spec": Text(shown(s.spec), style=style),
        "cmd": Text(shown(s.command), style=style),
    }
    return tuple(cells[k] for k in columns)


def schedule_detail(s: Schedule, why: str | None) -> Text:
    """Everything about schedule `s`, including where it is defined; `why`: why it is stray
    (None when it is not)."""
    t = Text()
    t.append(shown(s.id), style="bold")
    t.append(f"  {shown(s.kind)} on {s.host} as {shown(s.user)}, from {shown(s.source)}")
    if s.pid:
        t.append(f", pid {s.pid}")
    if s.next_run:
        t.append(f", next {shown(s.next_run)}")
    if not s.active:
        t.append(" (inactive)", style="dim")
    t.append("\n")
    t.append(shown(s.command))
    if s.stray:
        t.append(f"\nstray: {shown(why or '')}  —  a: acknowledge   x: remove", style="bold red")
    elif s.system:
        t.append("\ninstalled by the distribution: not stray", style="dim")
    return t
