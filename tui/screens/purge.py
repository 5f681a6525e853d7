"""The Purge modal: the backend's plan, each path typed back, then execute and re-verify keepers."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, Static

from ..fmt import human_bytes
from ..messages import ActionFinished
from .modal import Modal


def as_dict(obj: Any) -> dict[str, Any]:
    """A plan or report as the contract's JSON-shaped dict."""
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if is_dataclass(obj):
        return asdict(obj)
    return dict(obj)


def shown(path: str) -> str:
    """A path with control characters escaped, so a newline cannot disguise it."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in path)


def check_text(entry: dict[str, Any]) -> Text:
    """Failed checks first, each with its sentence; then the passed ones, in one line."""
    t = Text()
    messages = {r.get("code"): r.get("message") for r in entry.get("refusals") or []}
    checks = entry.get("checks") or {}
    for code in messages:
        t.append(f"✖ {code}: {messages[code] or 'failed'}\n", style="bold red")
    passed = [c for c, v in checks.items() if v == "pass"]
    skipped = [c for c, v in checks.items() if v not in ("pass", "fail")]
    if passed:
        t.append(f"✔ {len(passed)} passed: {', '.join(passed)}", style="green")
    if skipped:
        t.append(f"\n· skipped: {', '.join(skipped)}", style="dim")
    if not t.plain:
        t.append("? no checks reported", style="yellow")
    return t


class PurgeModal(Modal):
    """Delete checkpoints on one host. Focus starts on Cancel; Delete stays disabled until the
    plan passed every check and every path was typed exactly."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, host: str, paths: list[str], plan: Any = None) -> None:
        """`plan`: one already gathered (shown as is; execution still re-checks on the host)."""
        super().__init__()
        self.host = host
        self.paths = list(paths)
        self.plan: Any = plan
        self.report: Any = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="purge-dialog"):
            yield Label(f"Purge {len(self.paths)} path(s) on {self.host}", classes="title")
            with VerticalScroll(can_focus=False):
                yield Static(Text("gathering the plan: checking every path on the host…", style="dim"),
                             id="purge-verdict")
                yield DataTable(id="purge-plan", cursor_type="none", zebra_stripes=True)
                yield Static(id="purge-keepers")
                yield Static(id="purge-space")
                for i, p in enumerate(self.paths):
                    yield Label(f"Type [b]{escape(shown(p))}[/b] exactly to confirm:")
                    yield Input(placeholder="the path above, character for character",
                                id=f"confirm-{i}", classes="confirm", compact=True)
                yield Static(id="purge-result")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(f"Delete {len(self.paths)}", id="delete", variant="error", disabled=True)

    def on_mount(self) -> None:
        table = self.query_one("#purge-plan", DataTable)
        table.add_columns("Path", "Size", "Checks")
        table.can_focus = False  # tab goes from path to path, not through the plan
        self.query_one("#cancel", Button).focus()
        if self.plan is None:
            self.gather()
        else:
            self.show_plan(self.plan)
            self._update_button()

    @work(exclusive=True, group="purge-plan", exit_on_error=False)
    async def gather(self) -> None:
        """Ask the host for the plan: every check of every path, keepers, free space."""
        from fleetdeck.backend.actions.purge import gather_purge
        verdict = self.query_one("#purge-verdict", Static)
        try:
            plan = await gather_purge(self.app.link(self.host), self.app.fleet.host(self.host), self.paths)
        except Exception as e:
            verdict.update(Text(f"✖ could not gather the plan: {getattr(e, 'message', e)}", style="bold red"))
            self.app.report_error(f"Purge plan on {self.host}", e)
            return
        self.plan = plan
        self.show_plan(plan)
        self._update_button()

    def show_plan(self, plan: Any) -> None:
        """Fill the plan table, keepers and free space from the backend's plan."""
        d = as_dict(plan)
        table = self.query_one("#purge-plan", DataTable)
        table.clear()
        total = 0
        for entry in d.get("paths") or []:
            total += int(entry.get("bytes") or 0)
            table.add_row(Text(shown(str(entry.get("path")))), human_bytes(entry.get("bytes")),
                          check_text(entry), height=None)
        keepers = Text("Keepers (final adapters that must survive, sha256 taken now):\n", style="bold")
        for k in d.get("keepers") or []:
            keepers.append(f"  {shown(str(k.get('path')))}  ")
            keepers.append(f"sha256 {str(k.get('sha256_before') or '?')[:16]}…\n", style="dim")
        if not d.get("keepers"):
            keepers.append("  none\n", style="dim")
        self.query_one("#purge-keepers", Static).update(keepers)
        free, gain = d.get("free_bytes_before"), d.get("expected_bytes", total)
        space = Text(f"Free space now: {human_bytes(free)}   to be freed: {human_bytes(gain)}   "
                     f"expected after: {human_bytes(free + gain) if free is not None else '?'}")
        for w in d.get("warnings") or []:
            space.append(f"\n⚠ {w}", style="yellow")
        self.query_one("#purge-space", Static).update(space)
        verdict = self.query_one("#purge-verdict", Static)
        if plan.ok:
            verdict.update(Text("✔ every check passed. Type each path below to enable Delete.",
                                style="bold green"))
        else:
            why = Text("✖ refused, nothing can be deleted (Delete stays disabled):", style="bold red")
            for entry in d.get("paths") or []:
                for r in entry.get("refusals") or []:
                    why.append(f"\n  {shown(str(entry.get('path')))}: {r.get('code')}: {r.get('message')}",
                               style="red")
            verdict.update(why)

    def typed(self) -> dict[str, str]:
        """What the operator typed for each path."""
        return {p: self.query_one(f"#confirm-{i}", Input).value for i, p in enumerate(self.paths)}

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id and event.input.id.startswith("confirm-"):
            i = int(event.input.id.split("-")[1])
            event.input.set_class(event.value == self.paths[i], "typed-ok")
        self._update_button()

    def _update_button(self) -> None:
        from fleetdeck.backend.actions.purge import confirmations_match
        ok = (self.plan is not None and self.report is None and bool(self.plan.ok)
              and confirmations_match(self.plan, self.typed()))
        self.query_one("#delete", Button).disabled = not ok

    def on_input_submitted(self) -> None:
        if not self.query_one("#delete", Button).disabled:
            self.execute()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "delete":
            self.execute()
        else:
            self.dismiss(self.report)

    def action_cancel(self) -> None:
        """Close; nothing is deleted unless Delete already ran."""
        self.dismiss(self.report)

    @work(exclusive=True, group="purge", exit_on_error=False)
    async def execute(self) -> None:
        """Delete through the backend (it re-checks everything) and show what it verified."""
        from fleetdeck.backend.actions.purge import execute_purge
        self.query_one("#delete", Button).disabled = True
        result = self.query_one("#purge-result", Static)
        result.update(Text("deleting…", style="dim"))
        try:
            rep = await execute_purge(self.app.link(self.host), self.app.fleet.host(self.host),
                                      self.plan, self.typed())
        except Exception as e:
            result.update(Text(f"✖ {getattr(e, 'message', e)}", style="bold red"))
            self.app.report_error(f"Purge on {self.host}", e)
            return
        self.report = rep
        d = as_dict(rep)
        ok = bool(rep.ok)
        t = Text()
        if ok:
            t.append("✔ deleted and verified\n", style="bold green")
        elif d.get("deleted"):
            t.append("✖ deleted, but a keeper did NOT verify\n", style="bold red")
        else:
            t.append("✖ nothing deleted\n", style="bold red")
        for p in d.get("paths") or []:
            t.append(f"  {shown(str(p.get('path')))}: ")
            why = "; ".join(f"{r['code']}: {r['message']}" for r in p.get("refusals") or [])
            t.append("deleted" if p.get("deleted") else f"kept ({why or p.get('error') or 'not deleted'})",
                     style="green" if p.get("deleted") else "red")
            t.append("\n")
        before, after = d.get("free_bytes_before"), d.get("free_bytes_after")
        delta = f" ({'+' if (after or 0) >= (before or 0) else '-'}{human_bytes(abs((after or 0) - (before or 0)))})" \
            if before is not None and after is not None else ""
        t.append(f"Free space: {human_bytes(before)} before → {human_bytes(after)} after{delta}\n", style="bold")
        for k in d.get("keepers") or []:
            same = k.get("verified", k.get("sha256_before") == k.get("sha256_after"))
            t.append(f"  keeper {shown(str(k.get('path')))}: sha256 {str(k.get('sha256_after'))[:16]}… ")
            t.append("re-verified ✔\n" if same else "CHANGED ✖\n", style="green" if same else "bold red")
        result.update(t)
        self.query_one(VerticalScroll).scroll_end(animate=False)
        cancel = self.query_one("#cancel", Button)
        cancel.label = "Close"
        cancel.focus()
        refused = sorted({c for p in d.get("paths") or [] for c in p.get("refused") or []})
        summary = (f"{self.host}: deleted {len(self.paths)} path(s) ({human_bytes(d.get('expected_bytes'))}), "
                   f"keepers verified; free {human_bytes(before)} → {human_bytes(after)}." if ok else
                   f"{self.host}: nothing deleted ({', '.join(refused) or 'refused'})."
                   if not d.get("deleted") else f"{self.host}: deleted, but a keeper changed.")
        self.app.post_message(ActionFinished("purge", self.host, ok, summary))
