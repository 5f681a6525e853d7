"""The Mirror modal: a dry run first, then the copy with progress, then the verification."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short, size_short
from fleetdeck.show.cells import bar
from fleetdeck.show.fmt import host_text, said
from fleetdeck.tui.modals.mirror_text import (
    STATUS_STYLE,
    digest_text,
    digest_width,
    fixed_width,
    typeable,
    verdict_text,
)
from fleetdeck.tui.modals.typed_confirm import Outcome, TypedConfirmModal
from fleetdeck.tui.widgets.keyed_table import NavTable

if TYPE_CHECKING:
    from fleetdeck.backend.actions.mirror.report import MirrorReport


class MirrorModal(TypedConfirmModal["MirrorReport", "MirrorReport"]):
    """Copy `src_host:src_path` to a chosen host and path; polling goes on while it copies.

    A dry run comes first (enter in the path field runs it); the copy button is enabled only
    after a dry run of exactly this destination said what it would copy, and says it
    ("Copy 2 files, 160.0M"). A dry run refused `dst-differs` offers the replace: the
    destination's path typed back in a field of its own enables "Replace …", which copies
    beside it, proves the copy, swaps it in and keeps the old one aside (its name is shown).
    """

    DIALOG_ID = "mirror-dialog"
    ACT_VARIANT = "success"
    PLAN_BOX = RESULT_BOX = "mirror-result"
    PLAN_FAILED = ""
    #: a copy that failed can be dry-run and tried again
    RETRY = True
    #: one worker at a time: a dry run, or the copy
    PLAN_GROUP = RUN_GROUP = "mirror"

    def __init__(self, src_host: str, src_path: str, dst: tuple[str, ...] | None = None) -> None:
        """`plan` is the last dry run's report, `result` (`report`) the last report (the dry
        run's or the copy's); `dst`: the destination (host, path) filled in (a proposal's)."""
        super().__init__()
        self.src_host = src_host
        self.src_path = src_path
        self.dst = dst
        self._started = 0.0
        #: the destination the last dry run was for (`plan` is what it said)
        self.dry_for: tuple[str, str] | None = None
        #: the destination (and the replace's typed path) of the dry run or copy under way
        self.target: tuple[str, str, str | None] = ("", "", None)

    def title_text(self) -> str:
        return "Mirror an adapter"

    def compose_body(self) -> ComposeResult:
        others = [(h.name, h.name) for h in self.app.fleet.hosts if h.name != self.src_host]
        first = others[0][1] if len(others) == 1 else None
        if self.dst is not None and self.dst[0] in dict(others):
            first = self.dst[0]
        yield Static(Text.assemble(("From: ", "bold"), f"{self.src_host}:{shown(self.src_path)}"))
        yield Label("To host:")
        yield Select(
            others,
            prompt="pick the destination host",
            id="mirror-host",
            compact=True,
            value=first if first else Select.NULL,
        )
        yield Label("To path (created if absent; refused if it holds different content):")
        yield Input(
            typeable(self.dst[1])
            if self.dst is not None
            else self.default_path(first)
            if first
            else typeable(self.src_path),
            id="mirror-path",
            placeholder="type the destination path",
            classes="confirm",
            compact=True,
        )
        yield Static(
            Text("enter: dry run (shows what would be copied; nothing is written)", style="dim"),
            id="mirror-rate",
        )
        yield NavTable(id="mirror-files", cursor_type="row", zebra_stripes=True)
        yield Static(id="mirror-result")

    def compose_buttons(self) -> ComposeResult:
        yield Button("Dry run", id="dry", variant="primary")

    def prepare(self) -> None:
        # the verdict first: at 80 columns a long file name pushes the last column off the dialog
        self.query_one("#mirror-files", DataTable).add_columns(
            "Status", "File", "Bytes", "sha256 here", "sha256 there"
        )

    def focus_first_field(self) -> None:
        host = self.query_one("#mirror-host", Select)
        if host.value is Select.NULL:
            host.focus()
        else:
            super().focus_first_field()

    def replacing(self) -> bool:
        """The last dry run, of exactly this destination, found it holding different content."""
        return (
            self.dry_for is not None
            and self.dry_for == self.destination()
            and self.plan is not None
            and self.plan.reason == "dst-differs"
        )

    def checks_passed(self) -> bool:
        if self.replacing():
            return bool(self.query("#replace-confirm"))
        return (
            self.dry_for is not None
            and self.dry_for == self.destination()
            and self.plan is not None
            and self.plan.result == "would-copy"
        )

    def expected(self, field: Input) -> str | None:
        if field.id == "replace-confirm":
            # typed back only while replacing; otherwise left empty
            return self.destination()[1] if self.replacing() else ""
        return None

    def offer_replace(self) -> None:
        """After `dst-differs`: the field in which the destination's path is typed back (mounted
        only then, so the modal looks as before for every other answer)."""
        if self.query("#replace-confirm"):
            return
        path = self.destination()[1]
        self.query_one(f"#{self.DIALOG_ID}").mount_all(
            [
                Label(
                    Text.assemble(
                        "It holds different content. To replace it (the copy is proven first; the "
                        "old one is kept beside it as ",
                        (f"{shown(path)}.replaced-<UTC time>", "bold"),
                        "), type its path exactly:",
                    ),
                    id="replace-label",
                ),
                Input(
                    placeholder="the destination path, character for character",
                    id="replace-confirm",
                    classes="confirm",
                    compact=True,
                ),
            ],
            before=self.query_one("#mirror-rate", Static),
        )

    def act_label(self) -> str:
        if self.dry_for is None or self.plan is None or self.dry_for != self.destination():
            return "Copy (dry run first)"
        rep = self.plan
        if (
            self.replacing()
            and self.query("#replace-confirm")
            and self.matches(self.query_one("#replace-confirm", Input))
        ):
            n = sum(
                1 for f in rep.files if getattr(f, "kind", "file") == "file" and f.status != "extra"
            )
            return f"Replace: copy {n} file{'s' if n != 1 else ''}, {size_short(rep.bytes_src)} (old kept)"
        if rep.result == "identical":
            return "Nothing to copy: identical"
        if rep.result != "would-copy":
            return "Copy refused"
        n = sum(1 for f in rep.files if getattr(f, "kind", "file") == "file")
        return f"Copy {n} file{'s' if n != 1 else ''}, {size_short(rep.bytes_src)}"

    def act(self) -> None:
        host, path = self.destination()
        if host:
            typed = self.query_one("#replace-confirm", Input).value if self.replacing() else None
            self.target = (host, path, typed)
            self.execute()

    def submitted(self, field: Input) -> None:
        # enter never copies: it runs the dry run, and once that passed it moves to the button
        # that says what the copy will do
        if self.ready():
            self.query_one("#act", Button).focus()
        elif not self.done:
            self.start_dry_run()

    def start_dry_run(self) -> None:
        """Dry run of the destination as entered (a warning when it is incomplete)."""
        host, path = self.destination()
        if not host or not path:
            self.notify(
                "Pick a destination host and type a path first.",
                title="Mirror",
                severity="warning",
                markup=False,
            )
            return
        self.target = (host, path, None)
        self.gather()

    def default_path(self, dst_host: str) -> str:
        """The same place under the destination's runs root (`<root>/run-N/adapter`), else SRC's
        path; empty when that holds a character no one can type (see `typeable`)."""
        src_cfg, dst_cfg = self.app.fleet.host(self.src_host), self.app.fleet.host(dst_host)
        for root in src_cfg.runs:
            prefix = root.rstrip("/") + "/"
            if self.src_path.startswith(prefix) and dst_cfg.runs:
                return typeable(dst_cfg.runs[0].rstrip("/") + "/" + self.src_path[len(prefix) :])
        return typeable(self.src_path)

    def on_select_changed(self, event: Select.Changed) -> None:
        if self.dst is not None and event.value == self.dst[0]:
            # the destination filled in (a proposal's): its path stays as proposed
            self.query_one("#mirror-path", Input).value = typeable(self.dst[1])
        elif event.value is not Select.NULL:
            self.query_one("#mirror-path", Input).value = self.default_path(str(event.value))
        self.refresh_act()

    def destination(self) -> tuple[str | None, str]:
        """The chosen (host, path)."""
        host = self.query_one("#mirror-host", Select).value
        return (None if host is Select.NULL else str(host)), self.query_one(
            "#mirror-path", Input
        ).value

    def pressed(self, button: Button) -> None:
        if button.id == "dry":
            self.start_dry_run()

    def on_progress(self, done: int, total: int) -> None:
        """Progress from the backend: bytes copied of the total, with the rate so far."""
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else None
        line = bar(done / total if total else 0.0, 30)
        line.append(
            f" {done / total if total else 0:4.0%}  {size_short(done)} of {size_short(total)}  "
            f"at {size_short(rate)}/s  ETA {duration_short(eta)}"
        )
        self.query_one("#mirror-rate", Static).update(line)

    def busy(self, what: str) -> None:
        """A dry run or the copy starts: no button starts another until it ends."""
        for b in ("#act", "#dry"):
            self.query_one(b, Button).disabled = True
        self._started = time.monotonic()
        self.query_one("#mirror-rate", Static).update(Text(what, style="dim"))

    async def make_plan(self) -> MirrorReport:
        """The dry run: what the copy would do (nothing is written)."""
        self.busy("listing both sides…")
        return await self.mirror(dry_run=True)

    async def run(self) -> MirrorReport:
        """The copy, with progress (polling and navigation go on meanwhile)."""
        return await self.mirror(dry_run=False)

    async def mirror(self, dry_run: bool) -> MirrorReport:
        """The backend's mirror to `target`, a dry run or the copy."""
        # deferred: actions.mirror (the copy's backend, loaded when a mirror is first asked)
        from fleetdeck.backend.actions.mirror.main import mirror

        dst_host, dst_path, replace_typed = self.target
        # a replace goes with the name typed to confirm it, as the audit records it
        confirmation = (
            None if replace_typed is None else {"via": "dashboard", "typed": replace_typed}
        )
        return await mirror(
            self.app.link(self.src_host),
            self.src_path,
            self.app.link(dst_host),
            dst_path,
            dry_run=dry_run,
            progress=None if dry_run else self.on_progress,
            replace=replace_typed is not None,
            confirmation=confirmation,
        )

    def failed_what(self) -> str:
        return f"Mirror to {self.target[0]}"

    def plan_failed(self, error: BaseException) -> None:
        self.app.report_error(self.failed_what(), error)
        self.run_failed()

    def run_failed(self) -> None:
        self.query_one("#dry", Button).disabled = False
        self.refresh_act()

    def starting(self) -> None:
        self.busy("listing both sides…")

    def show_plan(self, plan: MirrorReport) -> None:
        """The dry run's table and verdict; the replace offered when the destination differs."""
        dst_host, dst_path, _ = self.target
        self.show_report(plan, dst_host, True)
        self.dry_for = (dst_host, dst_path)
        self.query_one("#mirror-rate", Static).update(
            Text("dry run: nothing was copied", style="dim")
        )
        self.query_one("#dry", Button).disabled = False
        if self.replacing():
            self.offer_replace()
            self.call_after_refresh(self.focus_replace)
        self.refresh_act()
        self.query_one("#act" if self.ready() else "#dry", Button).focus()

    def show_result(self, report: MirrorReport) -> None:
        self.show_report(report, self.target[0], False)

    def summary(self, report: MirrorReport) -> Outcome:
        dst_host, dst_path, _ = self.target
        return Outcome(
            "mirror",
            dst_host,
            report.verified,
            f"{self.src_host}:{shown(self.src_path)} → {dst_host}:{shown(dst_path)} "
            + (
                f"verified ({report.verified_by})"
                if report.verified
                else f"NOT verified ({said(report.reason or report.result)})"
            ),
        )

    def focus_replace(self) -> None:
        if self.query("#replace-confirm"):
            self.query_one("#replace-confirm", Input).focus()

    def show_report(self, rep: MirrorReport, dst_host: str, dry_run: bool) -> None:
        """The verification table: every file's size and both hosts' sha256, and the verdict."""
        self.result = rep
        result = self.query_one("#mirror-result", Static)
        if not dry_run and rep.bytes_copied:
            line = bar(1.0, 30)
            line.append(f" 100%  {size_short(rep.bytes_copied)} copied in {rep.seconds:.1f} s")
            self.query_one("#mirror-rate", Static).update(line)
        table = self.query_one("#mirror-files", DataTable)
        table.clear()
        chunk = digest_width(table.size.width or self.app.size.width - 10, fixed_width(rep))
        for f in rep.files:
            # a dry run lists what is not there yet as missing: that is what it would copy
            st = "would copy" if dry_run and f.status in ("copied", "missing") else str(f.status)
            # Text cells: a str cell of a DataTable is read as markup
            table.add_row(
                Text(said(st), style=STATUS_STYLE.get(f.status, "")),
                host_text(f.path),
                size_short(f.bytes),
                digest_text(f.sha256_src, chunk),
                digest_text(f.sha256_dst, chunk),
                height=None,
            )
        result.update(verdict_text(rep, self.src_host, dst_host, dry_run))
