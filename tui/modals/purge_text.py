"""What a purge's plan and report look like in its modal: each path's checks, the runs' eval
losses, what was deleted and re-verified (the modal's layout and workers are in `purge`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.show.fmt import said

if TYPE_CHECKING:
    from fleetdeck.backend.actions.purge.plan import PathPlan, PurgePlan, PurgeReport


def check_text(entry: PathPlan) -> Text:
    """Failed checks first, each with its sentence; then the passed ones, in one line."""
    t = Text()
    for r in entry.refusals:
        t.append(f"✖ {said(r.code)}: {said(r.message or 'failed')}\n", style="bold red")
    checks = dict(getattr(entry, "checks", ()) or ())
    passed = [c for c, v in checks.items() if v == "pass"]
    skipped = [c for c, v in checks.items() if v not in ("pass", "fail")]
    # the names of passed checks would make the row wider than the dialog; failures are named
    if passed:
        t.append(
            f"✔ {'all ' if not entry.refusals and not skipped else ''}{len(passed)} "
            f"{'other ' if entry.refusals else ''}checks passed",
            style="green",
        )
    if skipped:
        t.append(f"\n· skipped: {said(', '.join(skipped))}", style="dim")
    if not t.plain:
        t.append("? no checks reported", style="yellow")
    return t


#: the plan table's columns (the bytes are the files' sizes, as `fleetdeck purge` prints them)
PLAN_COLUMNS = ("Path", "File bytes", "Checks")


def evals_text(plan: PurgePlan) -> Text:
    """Each run's checkpoints with the eval loss each recorded, the best marked and whether
    what the run keeps holds it."""
    t = Text()
    for e in getattr(plan, "evals", ()):
        if e.best is None:
            continue
        t.append(
            f"Eval loss of {shown(e.run)} (best {e.best_loss:.4g}, "
            f"{'kept' if e.best_kept else 'NOT kept'}):\n",
            style="bold",
        )
        for name, step, loss, best in e.rows():
            t.append(
                f"  {shown(name)}  step {step}  {loss}{'  ← best' if best else ''}\n",
                style="yellow" if best and not e.best_kept else "dim",
            )
    return t


def report_text(rep: PurgeReport) -> Text:
    """What the purge did: each path, free space before and after, each keeper re-verified."""
    t = Text()
    if rep.audit_error:
        # the purge is not done until its record is on disk: never shown as a success
        t.append(
            f"✖ {'deleted' if rep.deleted else 'nothing deleted'}, but the audit log was NOT "
            f"written: {said(rep.audit_error)}\n",
            style="bold red",
        )
        if rep.deleted and not rep.verified:
            t.append("✖ and a keeper did NOT verify\n", style="bold red")
    elif rep.ok:
        t.append(f"✔ deleted and verified: {rep.verified_by}\n", style="bold green")
    elif rep.deleted:
        t.append("✖ deleted, but a keeper did NOT verify\n", style="bold red")
    else:
        t.append("✖ nothing deleted\n", style="bold red")
    for p in rep.paths:
        t.append(f"  {shown(p.path)}: ")
        why = "; ".join(f"{r.code}: {r.message}" for r in p.refusals)
        t.append(
            "deleted" if p.deleted else f"kept ({said(why or p.error or 'not deleted')})",
            style="green" if p.deleted else "red",
        )
        t.append("\n")
    before, after = rep.free_bytes_before, rep.free_bytes_after
    delta = (
        f" ({'+' if after >= before else '-'}{size_short(abs(after - before))})"
        if before is not None and after is not None
        else ""
    )
    t.append(
        f"Free space: {size_short(before)} before → {size_short(after)} after{delta}\n",
        style="bold",
    )
    for k in rep.keepers:
        t.append(f"  keeper {shown(k.path)}: sha256 {shown(str(k.sha256_after))} ")
        t.append(
            "re-verified ✔\n" if k.verified else "CHANGED ✖\n",
            style="green" if k.verified else "bold red",
        )
    return t
