"""How `fleetdeck purge` prints a plan and a report on a terminal: each path with its size and
checks, the keepers and their sha256, the runs' eval losses, free space before and after (the
command, its prompt and its confirmations are in `purge`)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions.purge.plan import PathPlan, PathResult, PurgePlan, PurgeReport
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.fmt import said


def _path_table(rows: Iterable[tuple[str, int | None, str, str]]) -> Table:
    t = Table(show_edge=False, pad_edge=False)
    t.add_column("path (escaped)", overflow="fold")
    t.add_column("file bytes", justify="right")
    t.add_column("result")
    for path, size, result, style in rows:
        t.add_row(Text(shown(path)), size_short(size), Text(result, style=style))
    return t


def _refusal_lines(console: Console, paths: Iterable[PathPlan | PathResult]) -> None:
    for p in paths:
        for r in p.refusals:
            console.print(
                Text.assemble((f"  {r.code}", "red"), ": ", shown(p.path), ": ", said(r.message))
            )


def _check_line(checks: tuple[tuple[str, str], ...]) -> Text:
    passed = [c for c, v in checks if v == "pass"]
    failed = [c for c, v in checks if v == "fail"]
    skipped = [c for c, v in checks if v not in ("pass", "fail")]
    t = Text("    checks: ")
    t.append(f"{len(passed)} passed", style="green")
    if failed:
        t.append(f", failed: {', '.join(failed)}", style="red")
    if skipped:
        t.append(f", not run: {', '.join(skipped)}", style="dim")
    return t


def show_plan(console: Console, plan: PurgePlan, dry_run: bool = False) -> None:
    """The plan on a terminal: each path with its size and every check, the keepers (with
    size and sha256), free space now and expected back, warnings."""
    title = f"purge plan on {plan.host}" + (" (dry run: nothing deleted)" if dry_run else "")
    console.print(Text(title, style="bold"))
    console.print(
        _path_table(
            [
                (
                    p.path,
                    p.bytes,
                    f"passed {sum(1 for _, v in p.checks if v == 'pass')} checks"
                    if p.ok
                    else "refused: " + ", ".join(p.refused),
                    "green" if p.ok else "red",
                )
                for p in plan.paths
            ]
        )
    )
    for p in plan.paths:
        console.print(Text.assemble("  ", shown(p.path)))
        console.print(_check_line(p.checks))
    _refusal_lines(console, plan.paths)
    _eval_lines(console, plan)
    if plan.keep is not None:
        _keep_lines(console, plan)
    elif plan.keepers:
        console.print(
            Text("keepers (final adapters that must survive, re-hashed afterwards):", style="bold")
        )
    for k in plan.keepers:
        console.print(
            Text(
                f"  keeps {shown(k.path)}  {size_short(k.bytes)}  sha256 {k.sha256_before}",
                style="dim",
            )
        )
    # the two differ: sparse or hard-linked files, and block rounding
    console.print(
        f"free now: {size_short(plan.free_bytes_before)}, expected back: "
        f"{size_short(plan.expected_bytes)} of disk blocks (the files' sizes add up to "
        f"{size_short(sum(p.bytes for p in plan.paths))})"
    )
    for w in plan.warnings:
        console.print(Text(f"warning: {said(w)}", style="yellow"))


def _eval_lines(console: Console, plan: PurgePlan) -> None:
    """Each run's checkpoints with the eval loss each recorded, the best marked, and whether
    what the run keeps holds it."""
    for e in plan.evals:
        if e.best is None:
            continue
        kept = "kept" if e.best_kept else "NOT kept: deleting it needs --allow-best"
        console.print(
            Text(f"eval loss of {shown(e.run)} (best {e.best_loss:.4g}, {kept}):", style="bold")
        )
        for name, step, loss, best in e.rows():
            console.print(
                Text(
                    f"  {shown(name)}  step {step}  {loss}{'  <- best' if best else ''}",
                    style="yellow" if best and not e.best_kept else "dim",
                )
            )


def _keep_lines(console: Console, plan: PurgePlan) -> None:
    k = plan.keep
    assert k is not None
    if k.refusal is not None:
        console.print(Text.assemble((f"  {k.refusal.code}", "red"), ": ", said(k.refusal.message)))
        for step, paths in k.ambiguous:
            for path in paths:
                console.print(Text(f"  step {step}: {shown(path)}", style="yellow"))
        return
    complete = len(k.checkpoints) - len(k.incomplete)
    console.print(
        Text(
            f"keep rule: {shown(k.run)} keeps its newest {k.n} of {complete} complete "
            "checkpoints (hashed now, re-hashed afterwards):",
            style="bold",
        )
    )
    for path in k.kept:
        files = [x for x in plan.keepers if x.path.startswith(path.rstrip("/") + "/")]
        console.print(
            Text(
                f"  keeps {shown(path)}  {len(files)} files, "
                f"{size_short(sum(x.bytes for x in files))}",
                style="dim",
            )
        )
    for _step, path, why in k.incomplete:
        console.print(Text(f"  leaves {shown(path)}  {why}", style="yellow"))


def show_report(console: Console, plan: PurgePlan, report: PurgeReport) -> None:
    """The result on a terminal: what was deleted, keepers verified, space back vs expected."""
    console.print(Text(f"purge on {report.host}", style="bold"))
    console.print(
        _path_table(
            [
                (
                    p.path,
                    p.bytes,
                    "deleted"
                    if p.deleted
                    else "refused: " + ", ".join(r.code for r in p.refusals)
                    if p.refusals
                    else f"not deleted: {p.error or ''}",
                    "green" if p.deleted else "red",
                )
                for p in report.paths
            ]
        )
    )
    _refusal_lines(console, report.paths)
    touched = any(p.deleted for p in report.paths)
    for k in report.keepers:
        if not touched:
            console.print(
                Text(f"  keeps {shown(k.path)} (nothing deleted, not re-hashed)", style="dim")
            )
            continue
        style, word = ("green", "verified") if k.verified else ("red", "NOT verified")
        console.print(
            Text(f"  kept {shown(k.path)}  sha256 {k.sha256_after or '-'}  {word}", style=style)
        )
    if touched:
        console.print(
            Text(
                f"verified: {report.verified_by}"
                if report.verified
                else f"NOT verified: {report.verified_by}",
                style="green" if report.verified else "red",
            )
        )
    console.print(
        f"free before: {size_short(report.free_bytes_before)}, after: "
        f"{size_short(report.free_bytes_after)}, came back: {size_short(report.reclaimed_bytes)} "
        f"of {size_short(report.expected_bytes)} expected"
    )
    for w in report.warnings:
        console.print(Text(f"warning: {said(w)}", style="yellow"))
