"""The Mirror modal: a dry run first, then the copy with progress, then the verification."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.show.cells import bar
from fleetdeck.show.fmt import host_text, human_bytes, human_duration, said
from fleetdeck.tui.messages import ActionFinished
from fleetdeck.tui.modals.modal import TypedConfirmModal
from fleetdeck.tui.widgets.keyed_table import NavTable

STATUS_STYLE = {
    "copied": "green",
    "identical": "green",
    "mismatch": "bold red",
    "missing": "bold red",
    "extra": "yellow",
}


def typeable(path: str) -> str:
    """`path` as a field's starting value, or "" when it holds a control character or a byte
    that is not UTF-8: a field shows its value raw (an escape sequence in a run's name would
    reach the terminal) and no one could type such a name back anyway."""
    return path if path.isprintable() else ""


def digest_width(table_width: int, fixed: int) -> int:
    """How many characters of a sha256 one line of the files table holds: the two digest
    columns share what the other columns (`fixed` cells, with their padding) leave of a table
    `table_width` wide: the whole 64, else 32, 16 or 8 a line (the digest is never cut)."""
    room = (table_width - fixed - 4) // 2
    return next((n for n in (64, 32, 16) if n <= room), 8)


def digest_text(digest: object, chunk: int) -> Text:
    """A host's sha256, whole and escaped, `chunk` characters a line; `-` when there is none."""
    text = shown(str(digest)) if digest else "-"
    return Text("\n".join(text[i : i + chunk] for i in range(0, len(text), chunk)) or "-")


class MirrorModal(TypedConfirmModal):
    """Copy `src_host:src_path` to a chosen host and path; polling goes on while it copies.

    A dry run comes first (enter in the path field runs it); the copy button is enabled only
    after a dry run of exactly this destination said what it would copy, and says it
    ("Copy 2 files, 160.0M"). A dry run refused `dst-differs` offers the replace: the
    destination's path typed back in a field of its own enables "Replace …", which copies
    beside it, proves the copy, swaps it in and keeps the old one aside (its name is shown).
    """

    DIALOG_ID = "mirror-dialog"
    ACT_VARIANT = "success"

    def __init__(self, src_host: str, src_path: str) -> None:
        super().__init__()
        self.src_host = src_host
        self.src_path = src_path
        self._started = 0.0
        #: the destination the last dry run was for, and what it said
        self.dry_for: tuple[str | None, str] | None = None
        self.dry_report: Any = None

    @property
    def report(self) -> Any:
        """The last report (dry run or copy)."""
        return self.result

    def title_text(self) -> str:
        return "Mirror an adapter"

    def compose_body(self) -> ComposeResult:
        others = [(h.name, h.name) for h in self.app.fleet.hosts if h.name != self.src_host]
        first = others[0][1] if len(others) == 1 else None
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
            self.default_path(first) if first else typeable(self.src_path),
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
            and self.dry_report is not None
            and self.dry_report.reason == "dst-differs"
        )

    def checks_passed(self) -> bool:
        if self.replacing():
            return bool(self.query("#replace-confirm"))
        return (
            self.dry_for is not None
            and self.dry_for == self.destination()
            and self.dry_report is not None
            and self.dry_report.result == "would-copy"
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
        if self.dry_for is None or self.dry_report is None or self.dry_for != self.destination():
            return "Copy (dry run first)"
        rep = self.dry_report
        if (
            self.replacing()
            and self.query("#replace-confirm")
            and self.matches(self.query_one("#replace-confirm", Input))
        ):
            n = sum(
                1 for f in rep.files if getattr(f, "kind", "file") == "file" and f.status != "extra"
            )
            return f"Replace: copy {n} file{'s' if n != 1 else ''}, {human_bytes(rep.bytes_src)} (old kept)"
        if rep.result == "identical":
            return "Nothing to copy: identical"
        if rep.result != "would-copy":
            return "Copy refused"
        n = sum(1 for f in rep.files if getattr(f, "kind", "file") == "file")
        return f"Copy {n} file{'s' if n != 1 else ''}, {human_bytes(rep.bytes_src)}"

    def act(self) -> None:
        host, path = self.destination()
        if host:
            typed = self.query_one("#replace-confirm", Input).value if self.replacing() else None
            self.copy(host, path, False, typed)

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
        self.copy(host, path, True)

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
        if event.value is not Select.NULL:
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
            f" {done / total if total else 0:4.0%}  {human_bytes(done)} of {human_bytes(total)}  "
            f"at {human_bytes(rate)}/s  ETA {human_duration(eta)}"
        )
        self.query_one("#mirror-rate", Static).update(line)

    @work(exclusive=True, group="mirror", exit_on_error=False)
    async def copy(
        self, dst_host: str, dst_path: str, dry_run: bool, replace_typed: str | None = None
    ) -> None:
        """Run the backend's mirror in a worker (polling and navigation go on) and show its proof."""
        buttons = [self.query_one(b, Button) for b in ("#act", "#dry")]
        for b in buttons:
            b.disabled = True
        self._started = time.monotonic()
        self.query_one("#mirror-rate", Static).update(Text("listing both sides…", style="dim"))
        result = self.query_one("#mirror-result", Static)
        try:
            from fleetdeck.backend.actions.mirror.main import mirror

            replace = (
                {}
                if replace_typed is None
                else {"replace": True, "confirmation": {"via": "dashboard", "typed": replace_typed}}
            )
            rep = await mirror(
                self.app.link(self.src_host),
                self.src_path,
                self.app.link(dst_host),
                dst_path,
                dry_run=dry_run,
                progress=None if dry_run else self.on_progress,
                **replace,
            )
        except Exception as e:
            result.update(Text(f"✖ {said(getattr(e, 'message', e))}", style="bold red"))
            self.app.report_error(f"Mirror to {dst_host}", e)
            buttons[1].disabled = False
            self.refresh_act()
            return
        self.show_report(rep, dst_host, dry_run)
        if dry_run:
            self.dry_for, self.dry_report = (dst_host, dst_path), rep
            self.query_one("#mirror-rate", Static).update(
                Text("dry run: nothing was copied", style="dim")
            )
            buttons[1].disabled = False
            if self.replacing():
                self.offer_replace()
                self.call_after_refresh(self.focus_replace)
            self.refresh_act()
            (buttons[0] if self.ready() else buttons[1]).focus()
            return
        self.finished()
        self.app.post_message(
            ActionFinished(
                "mirror",
                dst_host,
                rep.verified,
                f"{self.src_host}:{shown(self.src_path)} → {dst_host}:{shown(dst_path)} "
                + (
                    f"verified ({rep.verified_by})"
                    if rep.verified
                    else f"NOT verified ({said(rep.reason or rep.result)})"
                ),
            )
        )

    def focus_replace(self) -> None:
        if self.query("#replace-confirm"):
            self.query_one("#replace-confirm", Input).focus()

    def show_report(self, rep: Any, dst_host: str, dry_run: bool) -> None:
        """The verification table: every file's size and both hosts' sha256, and the verdict."""
        self.result = rep
        result = self.query_one("#mirror-result", Static)
        if not dry_run and rep.bytes_copied:
            line = bar(1.0, 30)
            line.append(f" 100%  {human_bytes(rep.bytes_copied)} copied in {rep.seconds:.1f} s")
            self.query_one("#mirror-rate", Static).update(line)
        table = self.query_one("#mirror-files", DataTable)
        table.clear()
        # the status, file and size columns, each with its two cells of padding, and the scrollbar
        fixed = (
            sum(
                2 + max([len(h), *(len(c) for c in col)])
                for h, col in (
                    ("Status", ["would copy", *(str(f.status) for f in rep.files)]),
                    ("File", [shown(str(f.path)) for f in rep.files]),
                    ("Bytes", [human_bytes(f.bytes) for f in rep.files]),
                )
            )
            + 2
            + 4
        )
        chunk = digest_width(table.size.width or self.app.size.width - 10, fixed)
        for f in rep.files:
            # a dry run lists what is not there yet as missing: that is what it would copy
            st = "would copy" if dry_run and f.status in ("copied", "missing") else str(f.status)
            # Text cells: a str cell of a DataTable is read as markup
            table.add_row(
                Text(said(st), style=STATUS_STYLE.get(f.status, "")),
                host_text(f.path),
                human_bytes(f.bytes),
                digest_text(f.sha256_src, chunk),
                digest_text(f.sha256_dst, chunk),
                height=None,
            )
        t = Text()
        if dry_run:
            what = {
                "would-copy": f"would copy {human_bytes(rep.bytes_src)} to {dst_host}",
                "identical": f"{dst_host} already holds identical content",
            }.get(rep.result, said(rep.result))
            t.append(f"dry run, nothing copied: {what}. ", style="bold")
        else:
            t.append(
                "✔ verified: " if rep.verified else "✖ NOT verified: ",
                style="bold green" if rep.verified else "bold red",
            )
            if getattr(
                rep, "verified_by", None
            ):  # what the verdict stands on: files and their count
                t.append(f"{rep.verified_by}; ")
            t.append(
                f"{human_bytes(rep.bytes_src)} ({rep.bytes_src} B) on {self.src_host}, "
                f"{human_bytes(rep.bytes_dst)} ({rep.bytes_dst} B) on {dst_host}"
            )
        if rep.rate:
            t.append(
                f"\ncopied {human_bytes(rep.bytes_copied)} in {rep.seconds:.1f} s "
                f"({human_bytes(rep.rate)}/s)"
            )
        if getattr(rep, "kept_as", None):
            t.append(
                f"\nthe old destination is kept as {shown(rep.kept_as)} on {dst_host}; remove it by hand once "
                "it is no longer needed",
                style="bold",
            )
        if rep.error or rep.reason:
            t.append(
                f"\n{said(rep.result)} ({said(rep.reason)}): {said(rep.error or '')}",
                style="bold red",
            )
        result.update(t)
