"""The Runs view's actions on the selected run: describe it (`d`), purge its marked
checkpoints (`p`), mirror its adapter (`m`), resume it from its newest complete checkpoint
(`r`). Functions of the view: `RunsScreen` (`tui/views/runs.py`), which holds the selection and
the marks, keeps a thin `action_*` method for each key that calls the function here, handing
itself over as a `RunsView` (what these functions use of it); each action opens its pop-up
(`tui/modals/`)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from textual.notifications import SeverityLevel
from textual.widget import Widget

from fleetdeck.backend.actions.launch.values import read_run_toml
from fleetdeck.backend.actions.purge.plan import PurgeReport
from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.fleet.run_order import natural_key
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.tui.app_api import DashboardApp
from fleetdeck.tui.modals.describe import describe_run
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.rows.runs import RESUMABLE, resumable
from fleetdeck.tui.widgets.keyed_table import KeyedTable

W = TypeVar("W", bound=Widget)


class RunsView(Protocol):
    """What the actions use of the Runs view."""

    #: the checkpoints marked for purge, by run key
    marked: dict[str, set[str]]

    @property
    def app(self) -> DashboardApp: ...

    @property
    def selected(self) -> Run | None:
        """The run under the cursor."""
        ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...

    def query_one(self, selector: str, expect_type: type[W]) -> W: ...


def describe(view: RunsView) -> None:
    """`d`: the raw source behind the highlighted run."""
    if (r := view.selected) is None:
        view.notify("No run selected.", severity="warning", markup=False)
        return
    view.app.push_screen(describe_run(view.app, r))


def purge(view: RunsView) -> None:
    """`p`: purge the marked checkpoints of the selected run (or the highlighted one)."""
    r = view.selected
    if r is None:
        view.notify("No run selected.", severity="warning", markup=False)
        return
    # natural order (checkpoint-25 before checkpoint-100), as the checkpoints table lists them
    paths = sorted(view.marked.get(r.key, set()), key=natural_key)
    if not paths:
        key = view.query_one("#ckpt-table", KeyedTable).current_key
        paths = [key] if key else []
    if not paths:
        view.notify(
            f"{shown(r.name)} has no checkpoints to purge.", severity="warning", markup=False
        )
        return

    def purged(report: PurgeReport | None) -> None:
        # the marks go only with what was deleted: esc, a refusal or a failure keeps them
        if report is not None and report.deleted:
            view.marked.pop(r.key, None)

    view.app.push_screen(PurgeModal(r.host, paths), purged)


def mirror(view: RunsView) -> None:
    """`m`: mirror the selected run's adapter to another host."""
    r = view.selected
    if r is None or not r.adapter:
        view.notify(
            f"{shown(r.name) if r else 'No run'} has no final adapter to mirror yet.",
            title="Mirror",
            severity="warning",
            markup=False,
        )
        return
    view.app.push_screen(MirrorModal(r.host, r.adapter))


def run_to_resume(view: RunsView) -> Run | None:
    """`r`: the selected run when it is a failed or stopped one with a checkpoint to continue
    from; else None, having said why not."""
    r = view.selected
    if r is None:
        view.notify("No run selected.", severity="warning", markup=False)
        return None
    if r.state not in RESUMABLE:
        view.notify(
            f"{shown(r.name)} is {r.state}: only a failed, cancelled or stalled run can be resumed.",
            title="Resume",
            severity="warning",
            markup=False,
        )
        return None
    if not resumable(r):
        which = "complete checkpoint" if r.checkpoints else "checkpoint"
        view.notify(
            f"{shown(r.name)} has no {which} to resume from: it would start from step 0. "
            "Launch it again (n) instead.",
            title="Resume",
            severity="warning",
            markup=False,
        )
        return None
    return r


async def open_resume(view: RunsView, run: Run) -> None:
    """Read the run's own RUN.toml on its host, then open the launch pop-up to resume it (run
    in the view's `resume` worker)."""
    try:
        values = await read_run_toml(view.app.link(run.host), run.path)
    except Exception as e:
        view.app.report_error(f"Reading {shown(run.name)}'s RUN.toml", e)
        return
    if values is None:
        view.notify(
            f"{shown(run.name)} has no RUN.toml in its folder on {run.host}, so it was not started by "
            "fleetdeck launch and cannot be resumed from here.",
            title="Resume",
            severity="warning",
            markup=False,
        )
        return
    view.app.push_screen(LaunchModal(resume=run, values=values))
