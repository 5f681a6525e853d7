"""The Purge modal: the backend's plan, each path typed back, then execute and re-verify keepers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, DataTable, Input, Label, Static

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.fmt import said
from fleetdeck.tui.modals.purge_text import (
    PLAN_COLUMNS,
    check_text,
    evals_text,
    report_text,
)
from fleetdeck.tui.modals.typed_confirm import Outcome, TypedConfirmModal

if TYPE_CHECKING:
    from fleetdeck.backend.actions.purge.plan import PurgePlan, PurgeReport


class PurgeModal(TypedConfirmModal["PurgePlan", "PurgeReport"]):
    """Delete checkpoints on one host. Focus starts in the first path to type; Delete stays
    disabled until the plan passed every check and every path was typed exactly.

    A run without a final adapter is refused `no-keeper`; the modal then offers its keep rule:
    N typed in, "Keep newest N" opens the modal again in keep mode (`keep=N`, `paths` the run),
    where the run's path and N are both typed back before Delete is enabled."""

    DIALOG_ID = "purge-dialog"
    PLAN_BOX = "purge-verdict"
    RESULT_BOX = "purge-result"
    RUNNING = "deleting…"
    PLAN_GROUP = "purge-plan"
    RUN_GROUP = "purge"

    def __init__(
        self, host: str, paths: list[str], plan: PurgePlan | None = None, keep: int | None = None
    ) -> None:
        """`plan`: one already gathered (shown as is; execution still re-checks on the host);
        `keep`: the keep rule's N, `paths` then holding the run alone."""
        super().__init__()
        self.host = host
        self.paths = list(paths)
        self.plan = plan
        self.keep = keep
        #: best-eval checkpoints typed back to delete anyway (the CLI's --allow-best)
        self.allow_best: tuple[str, ...] = ()

    def title_text(self) -> str:
        if self.keep is not None:
            return f"Purge {shown(self.paths[0])} on {self.host}, keeping its newest {self.keep} checkpoints"
        return f"Purge {len(self.paths)} path{'s' if len(self.paths) != 1 else ''} on {self.host}"

    def memory_key(self) -> tuple | None:
        return ("purge", self.host, tuple(self.paths), self.keep)

    def compose_body(self) -> ComposeResult:
        yield Static(
            Text("gathering the plan: checking every path on the host…", style="dim"),
            id="purge-verdict",
        )
        yield DataTable(id="purge-plan", cursor_type="none", zebra_stripes=True)
        yield Static(id="purge-keepers")
        yield Static(id="purge-evals")
        yield Static(id="purge-space")
        if self.keep is not None:
            yield Label(
                Text.assemble(
                    "Type the run ", (shown(self.paths[0]), "bold"), " exactly to confirm:"
                )
            )
            yield Input(
                placeholder="the run's path, character for character",
                id="confirm-0",
                classes="confirm",
                compact=True,
            )
            yield Label(
                Text.assemble(
                    "Type the number of checkpoints it keeps (", (str(self.keep), "bold"), "):"
                )
            )
            yield Input(
                placeholder="the number above", id="keep-confirm", classes="confirm", compact=True
            )
        else:
            for i, p in enumerate(self.paths):
                yield Label(Text.assemble("Type ", (shown(p), "bold"), " exactly to confirm:"))
                yield Input(
                    placeholder="the path above, character for character",
                    id=f"confirm-{i}",
                    classes="confirm",
                    compact=True,
                )
        yield Static(id="purge-result")

    def offer_keep(self) -> None:
        """Under a plan refused for want of a final adapter: the field for N and the button
        that opens the keep rule (mounted only then, so other plans look as they did)."""
        if self.keep is not None or self.keep_run() is None or self.query("#keep-n"):
            return
        result = self.query_one("#purge-result", Static)
        self.query_one(f"#{self.DIALOG_ID}").mount_all(
            [
                Label(
                    Text(
                        "This run has no final adapter; it can keep its newest N checkpoints instead "
                        "(the others are deleted):",
                        style="yellow",
                    ),
                    id="keep-label",
                ),
                Input(placeholder="N (1 or more)", id="keep-n", type="integer", compact=True),
            ],
            before=result,
        )
        self.query_one(".buttons").mount(
            Button("Keep newest N", id="keep", disabled=True), before=self.query_one("#act", Button)
        )

    def prepare(self) -> None:
        table = self.query_one("#purge-plan", DataTable)
        table.add_columns(*PLAN_COLUMNS)
        table.can_focus = False  # tab goes from path to path, not through the plan
        self.show_or_gather()

    def expected(self, field: Input) -> str | None:
        if field.id == "keep-confirm":
            return str(self.keep)
        return self.paths[int(str(field.id).split("-")[1])]

    def keep_run(self) -> str | None:
        """The run a keep rule can free: the one run refused `no-keeper` for want of a final
        adapter (None when there is no such run, or more than one)."""
        if self.keep is not None or self.plan is None:
            return None
        runs = {r for e in self.plan.paths if "no-keeper" in e.refused for r in e.runs}
        return next(iter(runs)) if len(runs) == 1 else None

    def on_input_changed(self, event: Input.Changed) -> None:
        super().on_input_changed(event)
        if event.input.id == "keep-n":
            self.refresh_keep()
        if (
            event.input.id == "allow-best"
            and (best := self.unkept_best()) is not None
            and event.value == best
        ):
            self.allow_best = (
                *self.allow_best,
                best,
            )  # judged again on the host, with the allowance
            self.plan = None
            self.refresh_act()
            self.gather()

    def refresh_keep(self) -> None:
        if self.keep is not None or not self.query("#keep-n") or not self.query("#keep"):
            return
        value = self.query_one("#keep-n", Input).value
        ok = self.keep_run() is not None and value.isdigit() and int(value) >= 1
        button = self.query_one("#keep", Button)
        button.disabled = not ok
        button.label = Text(f"Keep newest {int(value)}" if ok else "Keep newest N")

    def pressed(self, button: Button) -> None:
        if button.id == "keep" and (run := self.keep_run()) is not None:
            n = int(self.query_one("#keep-n", Input).value)
            app = self.app
            self.dismiss(None)
            app.push_screen(PurgeModal(self.host, [run], keep=n))

    def checks_passed(self) -> bool:
        return self.plan is not None and bool(self.plan.ok)

    def act_label(self) -> str:
        n = (
            len(self.paths)
            if self.keep is None
            else len(self.plan.paths)
            if self.plan is not None
            else 0
        )
        what = f"Delete {n} path{'s' if n != 1 else ''}"
        if self.keep is not None:
            what = f"Delete {n} checkpoint{'s' if n != 1 else ''}, keep newest {self.keep}"
        return what if self.plan is None else f"{what}, {size_short(self.plan.expected_bytes)}"

    async def make_plan(self) -> PurgePlan:
        """Ask the host for the plan: every check of every path, keepers, free space."""
        # deferred: actions.purge (the purge's backend, loaded when a purge is first planned)
        from fleetdeck.backend.actions.purge.main import gather_keep_newest, gather_purge

        link = self.app.link(self.host)
        if self.keep is not None:
            return await gather_keep_newest(link, self.paths[0], self.keep, self.allow_best)
        return await gather_purge(link, self.paths, self.allow_best)

    def plan_failed(self, error: BaseException) -> None:
        self.app.report_error(f"Purge plan on {self.host}", error)

    def show_plan(self, plan: PurgePlan) -> None:
        """Fill the plan table, keepers and free space from the backend's plan."""
        table = self.query_one("#purge-plan", DataTable)
        # columns too: an auto-width column keeps the width of the longest path it ever held,
        # so after a resize to 80 columns the size and checks would stay off the dialog
        table.clear(columns=True)
        path_h, *rest = PLAN_COLUMNS
        longest = max((len(shown(e.path)) for e in plan.paths), default=len(path_h))
        table.add_column(path_h, width=max(len(path_h), min(self.path_width(), longest)))
        table.add_columns(*rest)
        for entry in plan.paths:
            table.add_row(
                # a path is never cut: it wraps within its column, its row as tall as it needs
                Text(shown(entry.path), overflow="fold"),
                size_short(entry.bytes),
                check_text(entry),
                height=None,
            )
        keepers = Text(
            "Keepers (final adapters that must survive, sha256 taken now):\n", style="bold"
        )
        if plan.keep is not None:
            keepers = Text(
                f"Keepers (its newest {plan.keep.n} checkpoints; sha256 of every file taken now):\n",
                style="bold",
            )
            for path in plan.keep.kept:
                keepers.append(f"  {shown(path)}\n")
        for k in plan.keepers if plan.keep is None else ():
            # the whole digest, as the CLI prints it: the line wraps where the dialog is narrow
            keepers.append(f"  {shown(k.path)}\n")
            keepers.append(f"    sha256 {shown(str(k.sha256_before or '?'))}\n", style="dim")
        if not plan.keepers:
            keepers.append("  none\n", style="dim")
        self.query_one("#purge-keepers", Static).update(keepers)
        self.query_one("#purge-evals", Static).update(evals_text(plan))
        free, gain = plan.free_bytes_before, plan.expected_bytes
        # the table's bytes are the files' sizes; what is freed is counted in disk blocks
        # (sparse or hard-linked files and block rounding make the two differ)
        space = Text(
            f"Free space now: {size_short(free)}   to be freed: {size_short(gain)} of disk blocks "
            f"(files: {size_short(sum(e.bytes for e in plan.paths))})   "
            f"expected after: {size_short(free + gain) if free is not None else '?'}"
        )
        for w in plan.warnings:
            space.append(f"\n⚠ {said(w)}", style="yellow")
        self.query_one("#purge-space", Static).update(space)
        verdict = self.query_one("#purge-verdict", Static)
        if plan.ok:
            verdict.update(
                Text(
                    f"✔ every check passed ({len(plan.paths)} path(s); {plan.witnesses} kept file(s) "
                    "to re-hash). Type each path to enable Delete.",
                    style="bold green",
                )
            )
        else:
            why = Text(
                "✖ refused, nothing can be deleted (Delete stays disabled):", style="bold red"
            )
            if plan.keep is not None and plan.keep.refusal is not None:
                why.append(
                    f"\n  {said(plan.keep.refusal.code)}: {said(plan.keep.refusal.message)}",
                    style="red",
                )
            for entry in plan.paths:
                for r in entry.refusals:
                    why.append(
                        f"\n  {shown(entry.path)}: {said(r.code)}: {said(r.message)}", style="red"
                    )
            if (run := self.keep_run()) is not None:
                why.append(
                    f"\n{shown(run)} has no final adapter: type N below and press "
                    "Keep newest N to keep its newest N checkpoints instead.",
                    style="yellow",
                )
                self.offer_keep()
            if (best := self.unkept_best()) is not None:
                why.append(
                    f"\n{shown(best)} holds its run's best eval loss and nothing kept holds the same "
                    "weights: type its path in the field below to delete it anyway.",
                    style="yellow",
                )
                self.offer_allow_best()
            verdict.update(why)
        self.refresh_act()

    def unkept_best(self) -> str | None:
        """The best-eval checkpoint this plan refuses to delete (`best-eval`), or None."""
        if self.plan is None or not any("best-eval" in e.refused for e in self.plan.paths):
            return None
        return next(
            (
                e.best
                for e in self.plan.evals
                if e.best and e.best_kept is False and e.best not in self.allow_best
            ),
            None,
        )

    def offer_allow_best(self) -> None:
        """The field in which the best-eval checkpoint's path is typed back (mounted only then)."""
        if self.query("#allow-best"):
            return
        result = self.query_one("#purge-result", Static)
        self.query_one(f"#{self.DIALOG_ID}").mount_all(
            [
                Label(
                    Text(
                        "To delete the best-eval checkpoint anyway, type its path exactly:",
                        style="yellow",
                    ),
                    id="allow-best-label",
                ),
                Input(
                    placeholder="the best checkpoint's path, character for character",
                    id="allow-best",
                    compact=True,
                ),
            ],
            before=result,
        )

    def path_width(self) -> int:
        """Room for a path in the plan table, so that its size and checks stay on screen at 80
        columns (the dialog is 90 % of the screen; the size, the checks and the cell padding
        take about 45). A longer path wraps in it, whole."""
        dialog = min(140, self.app.size.width * 9 // 10)
        return max(16, dialog - 50)

    def on_resize(self) -> None:
        if self.plan is not None:
            self.show_plan(self.plan)

    def typed(self) -> dict[str, str]:
        """What the operator typed for each path (under the keep rule: for the run)."""
        return {p: self.query_one(f"#confirm-{i}", Input).value for i, p in enumerate(self.paths)}

    async def run(self) -> PurgeReport:
        """Delete through the backend (it re-checks everything)."""
        # deferred: actions.purge (the purge's backend, loaded when a purge is first planned)
        from fleetdeck.backend.actions.purge.main import execute_purge

        assert self.plan is not None  # Delete is enabled only under a plan that passed
        return await execute_purge(self.app.link(self.host), self.plan, self.typed())

    def failed_what(self) -> str:
        return f"Purge on {self.host}"

    def show_result(self, report: PurgeReport) -> None:
        """What it verified: each path, free space, each keeper re-hashed."""
        result = self.query_one("#purge-result", Static)
        result.update(report_text(report))
        result.scroll_visible(animate=False)

    def summary(self, report: PurgeReport) -> Outcome:
        rep = report
        ok = bool(rep.ok) and not rep.audit_error
        before, after = rep.free_bytes_before, rep.free_bytes_after
        refused = sorted({r.code for p in rep.paths for r in p.refusals})
        summary = (
            f"{self.host}: deleted {len(rep.paths)} path(s) ({size_short(rep.expected_bytes)}), "
            f"{rep.verified_by}; free {size_short(before)} → {size_short(after)}."
            if ok
            else f"{self.host}: nothing deleted ({', '.join(refused) or 'refused'})."
            if not rep.deleted
            else f"{self.host}: deleted, but a keeper changed."
            if not rep.verified
            else f"{self.host}: deleted, but NOT audited: {said(rep.audit_error)}"
        )
        return Outcome("purge", self.host, ok, summary)
