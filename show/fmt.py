"""Plain formatting shared by the CLI tables and the dashboard.

The display rule (docs/architecture.md): every string that came from a host reaches a terminal
through `shown` exactly once, and as Rich `Text`, never as markup. `host_text` is that for a
value read on a host (a run's name, a path, a command, a model); `said` / `message_text` are
for a sentence fleetdeck composed, whose host parts were already `shown` where it was made.
"""

from __future__ import annotations

from rich.text import Text

from fleetdeck.backend.host.lib import units
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.monitor.rules.alerts import severity_counts


def host_text(value: object, style: str = "") -> Text:
    """A value read on a host, escaped once by `shown` (no control byte, no undecodable
    byte reaches the terminal) and as `Text`, so `[bold]` in a folder's name is printed, not
    obeyed. None is shown as an empty text."""
    return Text(shown(None if value is None else str(value)), style=style)


def said(message: object) -> str:
    """A sentence fleetdeck composed, made safe to print: what `shown` escapes is escaped,
    except backslashes and line breaks, so a message whose host parts already went through
    `shown` comes out unchanged (`said(shown(x)) == shown(x)`), while a control byte or a
    surrogate that reached it raw still cannot reach the terminal."""
    text = str(message)
    if text.isprintable():
        return text
    return "".join(ch if ch in "\\\n" else shown(ch) for ch in text)


def message_text(message: object, style: str = "") -> Text:
    """`said(message)` as `Text`: never parsed as markup."""
    return Text(said(message), style=style)


def since_text(since: float, now: float) -> str:
    """How long ago `since` was, as the Alerts view and `fleetdeck alerts` both say it
    (`9m00s ago`; a `since` ahead of `now`, another clock's, reads `0s ago`)."""
    return units.duration_short(max(0.0, now - since)) + " ago"


#: how each alert severity is drawn, in the Alerts view and `fleetdeck alerts`
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def severity_text(severity: str) -> Text:
    """An alert's severity as a cell: its word in its colour."""
    return Text(severity, style=SEVERITY_STYLE.get(severity, ""))


def alerts_title(alerts: list) -> str:
    """`Alerts: 1 critical · 2 warning · 3 info firing, 4 resolved` (the counts by severity of
    the firing ones first), the title of the Alerts view and of `fleetdeck alerts`."""
    firing = [a for a in alerts if a.state == "firing"]
    counts = severity_counts(firing)
    head = (
        " · ".join(f"{n} {sev}" for sev, n in counts.items()) + " firing"
        if firing
        else "none firing"
    )
    resolved = len(alerts) - len(firing)
    return f"Alerts: {head}" + (f", {resolved} resolved" if resolved else "")


def human_mib(mib: float | None) -> str:
    """MiB figure as a human size."""
    return units.size_short(None if mib is None else mib * 1024 * 1024, "-")


def progress_text(step: int | None, max_steps: int | None) -> str:
    """'120/159 (75%)' or what is known of it."""
    if step is None:
        return "-"
    if not max_steps:
        return str(step)
    return f"{step}/{max_steps} ({100 * step / max_steps:.0f}%)"


def shorten_unique(names: list[str] | tuple[str, ...] | set[str], width: int) -> dict[str, str]:
    """Each name cut to `width` characters so that different names never look the same.

    Names that fit are kept. Longer ones keep their head and tail around a `…`
    (`gpu-node-017` -> `gpu-…017`), the split chosen so that no two results are equal; when
    no split separates them (they differ only in the middle), the part where they differ is
    shown, and as a last resort a number is appended.
    """
    width = max(width, 2)
    uniq = sorted(set(names))
    out: dict[str, str] = {}
    long = [n for n in uniq if len(n) > width]
    taken = {n for n in uniq if len(n) <= width}
    for n in uniq:
        if len(n) <= width:
            out[n] = n

    def fits(cands: dict[str, str]) -> bool:
        vals = list(cands.values())
        return len(set(vals)) == len(vals) and not (set(vals) & taken)

    for head in range(width - 1, 0, -1):
        tail = width - 1 - head
        cands = {n: n[:head] + "…" + (n[-tail:] if tail else "") for n in long}
        if fits(cands):
            out.update(cands)
            return out
    # they differ only somewhere in the middle: show a window around where each one differs
    for n in long:
        others = [m for m in long if m != n]
        first = min(
            (
                next((i for i, (a, b) in enumerate(zip(n, m, strict=False)) if a != b), len(n))
                for m in others
            ),
            default=0,
        )
        start = max(1, min(first - (width - 2) // 2, len(n) - (width - 1)))
        s = base = "…" + n[start : start + width - 1]
        k = 0
        while s in taken or s in out.values():
            k += 1
            s = base[: width - len(str(k)) - 1] + "~" + str(k)
        out[n] = s
    return out


def matches(needle: str | None, *fields: object) -> bool:
    """`--filter TEXT` and the dashboard's `/`: TEXT found, case-insensitively, in what a row
    shows (each field as the display rule writes it, so `\x1b` in a name is matched as shown).
    No needle matches everything."""
    if not needle:
        return True
    hay = " ".join(shown(str(f)) for f in fields if f is not None).casefold()
    return needle.casefold() in hay


#: the states in which a run has a pace: a finished, failed or cancelled run has none
PACED = ("running", "stalled")


def pace_text(state: str, seconds_per_step: float | None, unit: str = "") -> str:
    """A run's s/step as the views and the CLI show it: `-` for a run that is not live (its last
    pace says nothing now: never `0.00 s/step` for a finished run) or whose pace is unknown."""
    if state not in PACED or not seconds_per_step or seconds_per_step <= 0:
        return "-"
    return f"{seconds_per_step:.2f}{unit}"
