"""`fleetdeck purge HOST PATH... [--confirm PATH]... [--dry-run] [--json]`: delete checkpoint
folders only after every check passed and each path was typed back exactly. The printing of
the plan and the report is in `purge_print`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from fleetdeck.backend.actions.purge.main import (
    audit_dry_run,
    execute_purge,
    gather_keep_newest,
    gather_purge,
)
from fleetdeck.backend.actions.purge.plan import PurgePlan, PurgeReport
from fleetdeck.backend.fleet.config import HostConfig, load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.cli.purge_print import show_plan, show_report
from fleetdeck.show.fmt import said


def register(sub: argparse._SubParsersAction) -> None:
    """Add `purge` to the command line."""
    p = sub.add_parser(
        "purge",
        help="delete checkpoint folders after every safety check and a literal confirmation",
        description="Delete checkpoint folders on HOST. Every PATH is taken literally; nothing is deleted "
        "unless every path passes every check and is confirmed byte for byte. A path that starts "
        "with '-' goes after '--'; confirm it as --confirm=PATH.",
    )
    add_hosts_option(p)
    p.add_argument("host", metavar="HOST")
    p.add_argument("paths", nargs="+", metavar="PATH", help="folder to delete, taken literally")
    p.add_argument(
        "--confirm",
        action="append",
        default=[],
        metavar="PATH",
        help="confirm one PATH, typed exactly (once per path); without it a terminal prompts",
    )
    p.add_argument(
        "--keep-newest",
        type=int,
        default=None,
        metavar="N",
        help="PATH is a run without a final adapter: delete its checkpoints but the newest N "
        "(by step), which are hashed before and after like an adapter; confirm the run's path",
    )
    p.add_argument(
        "--allow-best",
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="delete this checkpoint although it holds its run's best eval loss and nothing kept "
        "holds the same weights: its path, typed exactly as the plan shows it",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check and print the plan, delete nothing"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run_purge)


def run_purge(args: argparse.Namespace) -> int:
    """Plan, show the plan, confirm, execute, verify; 0 only when deleted, every keeper
    verified and every audit record written."""
    if args.keep_newest is not None and (args.keep_newest < 1 or len(args.paths) != 1):
        print("fleetdeck: --keep-newest N takes one run folder and N of 1 or more", file=sys.stderr)
        return 2
    fleet = load_fleet(args.hosts)
    host = fleet.host(args.host)
    try:
        return asyncio.run(_purge(args, host))
    except HostError as e:
        if args.json:  # one JSON document whatever happened: nothing was deleted
            print(
                json.dumps(
                    {
                        "host": host.name,
                        "dry_run": bool(args.dry_run),
                        "deleted": False,
                        "ok": False,
                        "reason": e.code,
                        "error": e.message,
                        "paths": [],
                    },
                    indent=1,
                )
            )
        print(f"fleetdeck: purge on {host.name} failed: {said(e.message)}", file=sys.stderr)
        return 1


def pair_confirmations(paths: list[str], confirms: list[str]) -> dict[str, str]:
    """What was typed for each path: an exact `--confirm` where one was given, else the
    remaining `--confirm` values in order, so a wrong one is recorded and shown as typed."""
    left = list(confirms)
    typed: dict[str, str] = {}
    for p in paths:
        if p in left and p not in typed:
            typed[p] = p
            left.remove(p)
    for p, c in zip([p for p in paths if p not in typed], left, strict=False):
        typed[p] = c
    return typed


def _unused(given: list[str], used: list[str]) -> list[str]:
    """The confirmations of `given` left over once each of `used` has taken one equal to it."""
    left = list(used)
    extra = []
    for c in given:
        if c in left:
            left.remove(c)
        else:
            extra.append(c)
    return extra


async def _purge(args: argparse.Namespace, host: HostConfig) -> int:
    link = HostLink(host)
    try:
        if args.keep_newest is not None:
            plan = await gather_keep_newest(
                link, args.paths[0], args.keep_newest, tuple(args.allow_best)
            )
        else:
            plan = await gather_purge(link, list(args.paths), tuple(args.allow_best))
        stray = [b for b in args.allow_best if b not in {e.best for e in plan.evals}]
        if stray:
            # an allowance for a checkpoint that is not a run's best is a mistake, never ignored
            print(
                f"fleetdeck: --allow-best {said(shown(stray[0]))} is not the best-eval checkpoint of a run "
                "this purge touches; nothing was deleted",
                file=sys.stderr,
            )
            return 2
        if args.dry_run:
            audit_error = audit_dry_run(plan)
            _emit(
                args,
                {**plan.to_json(), "audit_error": audit_error},
                lambda c: show_plan(c, plan, dry_run=True),
            )
            if not plan.ok:
                print(
                    f"fleetdeck: purge on {host.name} would be refused: {said(_codes(plan))}",
                    file=sys.stderr,
                )
            if audit_error:
                print(f"fleetdeck: {audit_error}", file=sys.stderr)
            return 0 if plan.ok and not audit_error else 1
        prompting = not args.confirm and plan.ok and sys.stdin.isatty()
        # the plan comes first: what would go, its size, every check and the keepers
        if not args.json:
            show_plan(Console(highlight=False), plan)
        elif prompting:
            show_plan(Console(stderr=True, highlight=False), plan)
        if args.confirm:
            typed, via = (
                pair_confirmations(list(plan.confirm_texts()), list(args.confirm)),
                "--confirm",
            )
            extra = _unused(list(args.confirm), list(typed.values()))
            if extra:
                # a confirmation for a path that is not in this purge is a mistake, never ignored
                print(
                    f"fleetdeck: --confirm {said(shown(extra[0]))} matches no path of this purge"
                    f"{f' (and {len(extra) - 1} more)' if len(extra) > 1 else ''}; nothing was deleted",
                    file=sys.stderr,
                )
                return 2
        elif prompting:
            typed, via = _prompt(plan), "prompt"
        else:
            typed, via = {}, "none"
        report = await execute_purge(link, plan, typed, via=via)
    finally:
        await link.close()
    _emit(args, report.to_json(), lambda c: show_report(c, plan, report))
    if not report.ok:
        print(f"fleetdeck: {said(_failure(report))}", file=sys.stderr)
    if report.audit_error:
        print(f"fleetdeck: {report.audit_error}", file=sys.stderr)
    return 0 if report.ok and not report.audit_error else 1


def _emit(args: argparse.Namespace, doc: dict, human: Callable[[Console], object]) -> None:
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        human(Console(highlight=False))


def _codes(plan: PurgePlan) -> str:
    if plan.keep is not None and plan.keep.refusal is not None:
        return f"{plan.keep.refusal.code}: {plan.keep.refusal.message}"
    return ", ".join(sorted({c for p in plan.paths for c in p.refused})) or "no paths"


def _failure(report: PurgeReport) -> str:
    if report.keep is not None and report.keep.refusal is not None:
        r = report.keep.refusal
        return f"purge on {report.host} refused, nothing was deleted ({r.code}): {r.message}"
    codes = sorted({r.code for p in report.paths for r in p.refusals})
    if codes and not any(p.deleted for p in report.paths):
        wrong = [p for p in report.paths if p.typed is not None and p.typed != p.path]
        if report.keep is not None:
            wrong = [p for p in report.paths if p.typed is not None and p.typed != report.keep.run]
        mismatch = "".join(
            f": the confirmation '{shown(p.typed)}' did not match "
            f"'{shown(report.keep.run if report.keep else p.path)}'"
            for p in wrong[:1]
            if p.typed is not None
        )
        return f"purge on {report.host} refused, nothing was deleted ({', '.join(codes)}){mismatch}"
    if not report.deleted:
        failed = [p for p in report.paths if not p.deleted]
        why = failed[0].error or (
            failed[0].refusals[0].message if failed[0].refusals else "unknown"
        )
        return f"purge on {report.host} stopped at {shown(failed[0].path)}: {why}"
    bad = [k for k in report.keepers if not k.verified]
    if not bad:
        return f"purge on {report.host} deleted the paths but {report.verified_by}"
    return (
        f"purge on {report.host} deleted the paths but {len(bad)} kept adapter file(s) did not verify, "
        f"first {shown(bad[0].path)}"
    )


def _prompt(plan: PurgePlan) -> dict[str, str]:
    """Ask on the terminal for each path typed exactly; stops at the first mismatch."""
    typed: dict[str, str] = {}
    err = Console(stderr=True, highlight=False)
    what = (
        f"Type the run (it keeps its newest {plan.keep.n} checkpoints, the others are deleted) "
        if plan.keep is not None
        else "Type the path to delete "
    )
    for path in plan.confirm_texts():
        if not path.isprintable():
            err.print(
                Text(
                    f"{shown(path)} holds characters a prompt cannot take; "
                    "confirm it with --confirm=PATH instead.",
                    style="yellow",
                )
            )
            return typed
        err.print(Text.assemble(what, (shown(path), "bold"), " exactly:"))
        sys.stderr.write("> ")
        sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:
            return typed
        typed[path] = line[:-1] if line.endswith("\n") else line
        if typed[path] != path:
            return typed
    return typed
