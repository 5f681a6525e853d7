"""The Mirror modal: copy an adapter to another host with progress, then show the verification."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from ..fmt import human_bytes, human_duration
from ..messages import ActionFinished
from ..widgets.render import bar
from .modal import Modal
from .purge import as_dict, shown

STATUS_STYLE = {"copied": "green", "identical": "green", "mismatch": "bold red", "missing": "bold red",
                "extra": "yellow"}


class MirrorModal(Modal):
    """Copy `src_host:src_path` to a chosen host and path; polling goes on while it copies."""

    BINDINGS = [Binding("escape", "cancel", "Close")]

    def __init__(self, src_host: str, src_path: str) -> None:
        super().__init__()
        self.src_host = src_host
        self.src_path = src_path
        self.report: Any = None
        self._started = 0.0

    def compose(self) -> ComposeResult:
        others = [(h.name, h.name) for h in self.app.fleet.hosts if h.name != self.src_host]
        with Vertical(classes="dialog", id="mirror-dialog"):
            yield Label("Mirror an adapter", classes="title")
            yield Static(Text.assemble(("From: ", "bold"), f"{self.src_host}:{shown(self.src_path)}"))
            yield Label("To host:")
            yield Select(others, prompt="pick the destination host", id="mirror-host", compact=True,
                         value=others[0][1] if len(others) == 1 else Select.NULL)
            yield Label("To path (created if absent; refused if it holds different content):")
            first = others[0][1] if len(others) == 1 else None
            yield Input(self.default_path(first) if first else self.src_path, id="mirror-path", compact=True)
            yield Static(Text("not started", style="dim"), id="mirror-rate")
            with VerticalScroll(can_focus=False):
                yield DataTable(id="mirror-files", cursor_type="row", zebra_stripes=True)
                yield Static(id="mirror-result")
            with Horizontal(classes="buttons"):
                yield Button("Close", id="cancel")
                yield Button("Dry run", id="dry")
                yield Button("Copy and verify", id="start", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#mirror-files", DataTable).add_columns("File", "Bytes", "sha256 here", "sha256 there",
                                                               "Status")
        self.query_one("#mirror-host", Select).focus()

    def default_path(self, dst_host: str) -> str:
        """The same place under the destination's runs root (`<root>/run-N/adapter`), else SRC's path."""
        src_cfg, dst_cfg = self.app.fleet.host(self.src_host), self.app.fleet.host(dst_host)
        for root in src_cfg.runs:
            prefix = root.rstrip("/") + "/"
            if self.src_path.startswith(prefix) and dst_cfg.runs:
                return dst_cfg.runs[0].rstrip("/") + "/" + self.src_path[len(prefix):]
        return self.src_path

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self.query_one("#mirror-path", Input).value = self.default_path(str(event.value))

    def on_input_submitted(self) -> None:
        self.query_one("#start", Button).press()

    def destination(self) -> tuple[str | None, str]:
        """The chosen (host, path)."""
        host = self.query_one("#mirror-host", Select).value
        return (None if host is Select.NULL else str(host)), self.query_one("#mirror-path", Input).value

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id in ("start", "dry"):
            host, path = self.destination()
            if not host or not path:
                self.notify("Pick a destination host and type a path first.", title="Mirror",
                            severity="warning")
                return
            self.copy(host, path, event.button.id == "dry")
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        """Close; a copy in progress is cancelled and leaves no partial file under a final name."""
        self.dismiss(self.report)

    def on_progress(self, done: int, total: int) -> None:
        """Progress from the backend: bytes copied of the total, with the rate so far."""
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else None
        line = bar(done / total if total else 0.0, 30)
        line.append(f" {done / total if total else 0:4.0%}  {human_bytes(done)} of {human_bytes(total)}  "
                    f"at {human_bytes(rate)}/s  ETA {human_duration(eta)}")
        self.query_one("#mirror-rate", Static).update(line)

    @work(exclusive=True, group="mirror", exit_on_error=False)
    async def copy(self, dst_host: str, dst_path: str, dry_run: bool) -> None:
        """Run the backend's mirror in a worker (polling and navigation go on) and show its proof."""
        from fleetdeck.backend.actions.mirror import mirror
        for b in ("#start", "#dry"):
            self.query_one(b, Button).disabled = True
        self._started = time.monotonic()
        self.query_one("#mirror-rate", Static).update(Text("listing both sides…", style="dim"))
        result = self.query_one("#mirror-result", Static)
        try:
            rep = await mirror(self.app.link(self.src_host), self.src_path, self.app.link(dst_host), dst_path,
                               dry_run=dry_run, progress=self.on_progress)
        except Exception as e:
            result.update(Text(f"✖ {getattr(e, 'message', e)}", style="bold red"))
            self.app.report_error(f"Mirror to {dst_host}", e)
            for b in ("#start", "#dry"):
                self.query_one(b, Button).disabled = False
            return
        self.show_report(rep, dst_host, dry_run)
        if dry_run:
            self.query_one("#mirror-rate", Static).update(Text("dry run: nothing was copied", style="dim"))
        self.query_one("#cancel", Button).focus()
        if not dry_run:
            self.app.post_message(ActionFinished(
                "mirror", dst_host, rep.verified, f"{self.src_host}:{self.src_path} → {dst_host}:{dst_path} "
                + ("verified" if rep.verified else f"NOT verified ({rep.reason or rep.result})")))
        else:
            for b in ("#start", "#dry"):
                self.query_one(b, Button).disabled = False

    def show_report(self, rep: Any, dst_host: str, dry_run: bool) -> None:
        """The verification table: every file's size and both hosts' sha256, and the verdict."""
        self.report = rep
        result = self.query_one("#mirror-result", Static)
        d = as_dict(rep)
        if not dry_run and d.get("bytes_copied"):
            line = bar(1.0, 30)
            line.append(f" 100%  {human_bytes(d['bytes_copied'])} copied in {d.get('seconds')} s")
            self.query_one("#mirror-rate", Static).update(line)
        table = self.query_one("#mirror-files", DataTable)
        table.clear()
        for f in d.get("files") or []:
            st = str(f.get("status"))
            table.add_row(shown(str(f.get("path"))), human_bytes(f.get("bytes")),
                          str(f.get("sha256_src") or "-")[:12], str(f.get("sha256_dst") or "-")[:12],
                          Text(st, style=STATUS_STYLE.get(st, "")))
        ok = bool(d.get("verified"))
        t = Text()
        if dry_run:
            t.append(f"dry run, nothing copied ({d.get('result')}). ", style="bold")
        else:
            t.append("✔ verified: " if ok else "✖ NOT verified: ", style="bold green" if ok else "bold red")
        t.append(f"{human_bytes(d.get('bytes_src'))} ({d.get('bytes_src')} B) on {self.src_host}, "
                 f"{human_bytes(d.get('bytes_dst'))} ({d.get('bytes_dst')} B) on {dst_host}")
        if d.get("rate"):
            t.append(f"\ncopied {human_bytes(d.get('bytes_copied'))} in {d.get('seconds')} s "
                     f"({human_bytes(d['rate'])}/s)")
        if d.get("error") or d.get("reason"):
            t.append(f"\n{d.get('result')} ({d.get('reason')}): {d.get('error') or ''}", style="bold red")
        result.update(t)
