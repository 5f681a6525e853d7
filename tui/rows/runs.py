"""The Runs view's rows: a run's cells in the runs table (`run_cells`), its checkpoints'
(`checkpoint_rows`) and the detail pane's title (`run_title`)."""

from __future__ import annotations

from rich.text import Text

from fleetdeck.backend.fleet.models import Checkpoint, Run
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short, size_short
from fleetdeck.show.cells import progress
from fleetdeck.show.fmt import pace_text

#: states a run can be resumed from (the trainer continues from the newest checkpoint)
RESUMABLE = ("failed", "cancelled", "stalled")


def state_style(state: str) -> str:
    """The style of a run's state in the tables (running green, failed bold red...)."""
    return {
        "running": "green",
        "stalled": "bold yellow",
        "failed": "bold red",
        "finished": "blue",
    }.get(state, "")


def resumable(r: Run) -> list[Checkpoint]:
    """The run's checkpoints the trainer can continue from: all but those the host found
    incomplete (a save killed half-way), oldest first."""
    return [c for c in r.checkpoints if c.complete is not False]


def _bar_width(r: Run, width: int) -> int:
    """The progress bar's width in a cell `width` wide: the figures (`131/1000`) always fit, the
    bar gets what is left (3 up)."""
    figures = len(f" {r.step}/{r.max_steps}")
    return max(3, width - figures)


def run_cells(r: Run, w: dict[str, int], host: str, name: str, down: bool = False) -> tuple:
    """The runs table's cells of `r` for the columns `w` (key -> width), in their order; `host`
    and `name`: the run's host and name as the table shows them (whole, wrapped in their column).
    `down`: its host did not answer the last poll, so the row is its last answer's, dimmed, with
    its state marked `✖` and no pace or ETA (a run said to be running may have died with it)."""
    state = Text(
        r.state + (" ⚠" if r.reason and r.state != "running" else ""),
        style=state_style(r.state),
    )
    if down:
        state = Text(f"{r.state} ✖", style="dim")
    cells = {
        "host": Text(host, style="dim") if down else host,
        "name": Text(name, style="dim") if down else name,
        "state": state,
        "prog": progress(r.step, r.max_steps, _bar_width(r, w["prog"])),
        "sps": "-" if down else pace_text(r.state, r.seconds_per_step),
        "eta": "-" if r.eta_seconds is None or down else duration_short(r.eta_seconds),
        "loss": "-" if r.loss is None else f"{r.loss:.4f}",
        "eval": "-" if r.eval_loss is None else f"{r.eval_loss:.4f}",
    }
    return tuple(cells[k] for k in w)


def checkpoint_cell(c: Checkpoint) -> Text:
    """A checkpoint's name, and what it lacks when the host found it incomplete."""
    t = Text(shown(c.path.rsplit("/", 1)[-1]))
    if c.complete is False:
        t.append(f"  incomplete: {shown(c.problem or 'the host says so')}", style="bold red")
    return t


def checkpoint_rows(r: Run, marks: set[str]) -> dict[str, tuple]:
    """The checkpoints table's rows of `r`, by path; `marks`: the paths marked for purge."""
    return {
        c.path: (
            Text("✓" if c.path in marks else " ", style="bold red"),
            "?" if c.step is None else str(c.step),
            size_short(c.bytes),
            checkpoint_cell(c),
        )
        for c in r.checkpoints
    }


def run_title(r: Run, down: str | None = None) -> Text:
    """The detail pane's first lines: where the run is, its state and speed, its adapter, why it
    stopped and what `r` would resume it from; `down`: a sentence saying its host did not answer
    and how old what is shown is, first."""
    t = Text()
    if down:
        t.append(f"✖ {down}\n", style="bold red")
    t.append(f"{r.host}:{shown(r.path)}", style="bold")
    t.append(f"  {r.state}", style=state_style(r.state))
    if pace_text(r.state, r.seconds_per_step) != "-":
        t.append(f"  {pace_text(r.state, r.seconds_per_step, ' s/step')}")
    t.append(
        f"  adapter: {shown(r.adapter) if r.adapter else 'none yet'}",
        style="dim" if not r.adapter else "",
    )
    if r.reason:  # the trainer's or the launcher's own words, read from the run's files
        t.append(
            f"\nwhy {r.state}: {shown(r.reason)}",
            style="bold yellow" if r.state != "running" else "yellow",
        )
    elif r.state in RESUMABLE:
        # say so rather than leave the operator looking for a line that is not there
        t.append(
            f"\nwhy {r.state}: no reason recorded; the end of its train.log is below",
            style="bold yellow",
        )
    usable = resumable(r)
    if r.state in RESUMABLE and usable:
        t.append(
            f"   r: resume from {shown(usable[-1].path.rsplit('/', 1)[-1])}"
            + (" (the newest complete one)" if usable[-1] is not r.checkpoints[-1] else ""),
            style="dim",
        )
    elif r.state in RESUMABLE:
        t.append(
            "   no complete checkpoint to resume from (n launches it again)"
            if r.checkpoints
            else "   no checkpoint to resume from (n launches it again)",
            style="dim",
        )
    return t
