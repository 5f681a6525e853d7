"""The Runs view's actions on the selected run: describe it (`d`), purge its marked
checkpoints (`p`), mirror its adapter (`m`), resume it from its newest complete checkpoint
(`r`). A mixin of `RunsScreen` (`tui/views/runs.py`), which holds the selection and the marks;
each action opens its pop-up (`tui/modals/`)."""

from __future__ import annotations

from textual import work

from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.fleet.run_order import natural_key
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.tui.rows.runs import RESUMABLE, resumable
from fleetdeck.tui.widgets.keyed_table import KeyedTable


class RunActions:
    """`d`, `p`, `m` and `r` of the Runs view, on `self.selected`."""

    marked: dict[str, set[str]]

    def action_describe(self) -> None:
        """The raw source behind the highlighted run."""
        if (r := self.selected) is None:
            self.notify("No run selected.", severity="warning", markup=False)
            return
        from fleetdeck.tui.modals.describe import describe_run

        self.app.push_screen(describe_run(self.app, r))

    def action_purge(self) -> None:
        """Purge the marked checkpoints of the selected run (or the highlighted one)."""
        r = self.selected
        if r is None:
            self.notify("No run selected.", severity="warning", markup=False)
            return
        # natural order (checkpoint-25 before checkpoint-100), as the checkpoints table lists them
        paths = sorted(self.marked.get(r.key, set()), key=natural_key)
        if not paths:
            key = self.query_one("#ckpt-table", KeyedTable).current_key
            paths = [key] if key else []
        if not paths:
            self.notify(
                f"{shown(r.name)} has no checkpoints to purge.", severity="warning", markup=False
            )
            return
        from fleetdeck.tui.modals.purge import PurgeModal

        # the marks go only with what was deleted: esc, a refusal or a failure keeps them
        self.app.push_screen(
            PurgeModal(r.host, paths),
            lambda rep: self.marked.pop(r.key, None) if getattr(rep, "deleted", False) else None,
        )

    def action_mirror(self) -> None:
        """Mirror the selected run's adapter to another host."""
        r = self.selected
        if r is None or not r.adapter:
            self.notify(
                f"{shown(r.name) if r else 'No run'} has no final adapter to mirror yet.",
                title="Mirror",
                severity="warning",
                markup=False,
            )
            return
        from fleetdeck.tui.modals.mirror import MirrorModal

        self.app.push_screen(MirrorModal(r.host, r.adapter))

    def action_resume(self) -> None:
        """Offer to continue the selected failed or stopped run from its newest checkpoint."""
        r = self.selected
        if r is None:
            self.notify("No run selected.", severity="warning", markup=False)
            return
        if r.state not in RESUMABLE:
            self.notify(
                f"{shown(r.name)} is {r.state}: only a failed, cancelled or stalled run can be resumed.",
                title="Resume",
                severity="warning",
                markup=False,
            )
            return
        if not resumable(r):
            which = "complete checkpoint" if r.checkpoints else "checkpoint"
            self.notify(
                f"{shown(r.name)} has no {which} to resume from: it would start from step 0. "
                "Launch it again (n) instead.",
                title="Resume",
                severity="warning",
                markup=False,
            )
            return
        self.open_resume(r)

    @work(exclusive=True, group="resume", exit_on_error=False)
    async def open_resume(self, run: Run) -> None:
        """Read the run's own RUN.toml on its host, then open the launch pop-up to resume it."""
        from fleetdeck.backend.actions.launch_values import read_run_toml

        try:
            values = await read_run_toml(self.app.link(run.host), run.path)
        except Exception as e:
            self.app.report_error(f"Reading {shown(run.name)}'s RUN.toml", e)
            return
        if values is None:
            self.notify(
                f"{shown(run.name)} has no RUN.toml in its folder on {run.host}, so it was not started by "
                "fleetdeck launch and cannot be resumed from here.",
                title="Resume",
                severity="warning",
                markup=False,
            )
            return
        from fleetdeck.tui.modals.launch import LaunchModal

        self.app.push_screen(LaunchModal(resume=run, values=values))
