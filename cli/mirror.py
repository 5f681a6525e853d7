"""`fleetdeck mirror` and `fleetdeck verify`: copy a folder between hosts and prove it by sha256."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions.mirror.common import MirrorFile
from fleetdeck.backend.actions.mirror.main import mirror, parse_endpoint
from fleetdeck.backend.actions.mirror.report import MirrorReport
from fleetdeck.backend.actions.mirror.verify import verify
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.cli.args import add_hosts_option

STATUS_STYLE = {
    "copied": "green",
    "identical": "green",
    "mismatch": "red",
    "missing": "yellow",
    "extra": "magenta",
}
SHOWN = 40  # files listed in the table before the rest is summarised
KIND_SUFFIX = {"dir": "/", "symlink": " (symlink)", "special": " (special file)"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add `mirror` and `verify` to the command line."""
    p = sub.add_parser(
        "mirror",
        help="copy a folder from one host to another and prove it by sha256",
        description="Copy SRC to DST (created if absent) through this machine; "
        "exit 0 only when DST holds the same folders and regular files, every "
        "size and sha256 computed on each host from its own disk. DST holding "
        "different content is refused. A copy that moves no bytes for the host's "
        "command_timeout fails, naming the side that stalled.",
    )
    _common(p)
    p.add_argument("--dry-run", action="store_true", help="say what would be copied, copy nothing")
    p.add_argument(
        "--replace",
        action="store_true",
        help="DST holds different content: copy beside it, prove the copy, then put it in "
        "DST's place and keep the old one as DST.replaced-<UTC time> (never deleted)",
    )
    p.add_argument(
        "--confirm",
        metavar="DST_PATH",
        default=None,
        help="with --replace: DST's path typed exactly (without it a terminal asks for it)",
    )
    p.set_defaults(func=run_mirror)
    p = sub.add_parser(
        "verify",
        help="prove two folders identical (size and sha256 of every file)",
        description="Compare SRC and DST folder by folder and file by file, each "
        "hashed on its own host, DST never read through a symlink; exit 0 only "
        "when identical.",
    )
    _common(p)
    p.set_defaults(func=run_verify, dry_run=False)


def _common(p: argparse.ArgumentParser) -> None:
    add_hosts_option(p)
    p.add_argument(
        "src",
        metavar="SRC_HOST:PATH",
        help="source folder; PATH is taken literally, ~ expands on that host",
    )
    p.add_argument("dst", metavar="DST_HOST:PATH", help="destination folder")
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="copy what symlinks in SRC point to (default: refuse them); never applies "
        "to DST, where a symlink is always a difference",
    )
    p.add_argument(
        "--allow-outside-links",
        action="store_true",
        help="with --follow-symlinks, also follow links pointing outside SRC (they are "
        "named in the report; default: refuse them)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run_mirror(args: argparse.Namespace) -> int:
    """The `mirror` command; 0 only when DST is verified identical (or a dry run would proceed)."""
    return _run(args, "mirror")


def run_verify(args: argparse.Namespace) -> int:
    """The `verify` command; 0 only when SRC and DST are identical."""
    return _run(args, "verify")


def _run(args: argparse.Namespace, action: str) -> int:
    try:
        (sh, sp), (dh, dp) = parse_endpoint(args.src), parse_endpoint(args.dst)
    except ValueError as e:
        print(f"fleetdeck: {_one_line(str(e))}", file=sys.stderr)  # it quotes the argument
        return 2
    fleet = load_fleet(args.hosts)
    src_cfg, dst_cfg = fleet.host(sh), fleet.host(dh)
    if getattr(args, "confirm", None) is not None and not args.replace:
        print(
            "fleetdeck: --confirm goes with --replace (it confirms the destination to replace)",
            file=sys.stderr,
        )
        return 2
    show_bar = action == "mirror" and not args.json and not args.dry_run and sys.stdout.isatty()
    report = asyncio.run(_go(action, src_cfg, sp, dst_cfg, dp, args, show_bar))
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        _print(report)
    if report.error and not report.ok:
        what = (
            "refused"
            if report.result == "refused"
            else "failed"
            if report.result == "failed"
            else "not verified"
        )
        print(f"fleetdeck: {action} {what}: {_one_line(report.error)}", file=sys.stderr)
    return 0 if report.ok else 1


async def _go(action, src_cfg, sp, dst_cfg, dp, args, show_bar) -> MirrorReport:
    src = HostLink(src_cfg)
    dst = src if dst_cfg.name == src_cfg.name else HostLink(dst_cfg)
    try:
        if action == "verify":
            return await verify(
                src,
                sp,
                dst,
                dp,
                follow_symlinks=args.follow_symlinks,
                allow_outside_links=args.allow_outside_links,
            )
        opts = {
            "follow_symlinks": args.follow_symlinks,
            "allow_outside_links": args.allow_outside_links,
        }
        if args.replace and not args.dry_run:
            confirmed = await _confirm_replace(src, sp, dst, dp, args, opts)
            if isinstance(confirmed, MirrorReport):
                return confirmed  # nothing to replace after all, or not confirmed: as it stands
            opts.update(replace=True, confirmation=confirmed)
        elif args.replace:
            opts["replace"] = True
        if not show_bar:
            return await mirror(src, sp, dst, dp, dry_run=args.dry_run, **opts)
        with Progress(
            TextColumn("[bold]copying"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            transient=True,
        ) as bar:
            task = bar.add_task("copy", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return await mirror(src, sp, dst, dp, progress=progress, **opts)
    finally:
        await src.close()
        if dst is not src:
            await dst.close()


async def _confirm_replace(
    src: HostLink, sp: str, dst: HostLink, dp: str, args: argparse.Namespace, opts: dict[str, Any]
) -> dict | MirrorReport:
    """How the replace was confirmed: `--confirm` as typed (the backend compares it with DST
    byte for byte), or on a terminal the destination typed at a prompt after the difference is
    shown; without a terminal `--replace` itself is the request (the old copy is kept, not
    deleted). A dry run's report instead when there is nothing to replace, or the prompt got
    no answer."""
    if args.confirm is not None:
        return {"via": "--confirm", "typed": args.confirm}
    if not sys.stdin.isatty():
        return {"via": "--replace", "typed": None}
    plan = await mirror(src, sp, dst, dp, dry_run=True, replace=True, **opts)
    if plan.result != "would-replace":
        if plan.result == "would-copy":
            return {"via": "--replace", "typed": None}  # DST is absent or empty: a plain copy
        return plan
    err = Console(stderr=True, highlight=False)
    if not args.json:
        _table(Console(highlight=False), plan)
    err.print(
        Text.assemble(
            ("replace ", "bold"),
            shown(f"{dst.name}:{dp}"),
            " with a proven copy of ",
            shown(f"{src.name}:{sp}"),
            "? The old one is kept beside it as ",
            (shown(dp.rstrip("/")) + ".replaced-<UTC time>", "bold"),
            ".",
        )
    )
    if not dp.isprintable():
        err.print(
            Text(
                "The destination holds characters a prompt cannot take; confirm it with "
                "--confirm=PATH instead.",
                style="yellow",
            )
        )
        return {"via": "prompt", "typed": ""}
    err.print(Text.assemble("Type the destination path ", (shown(dp), "bold"), " exactly:"))
    sys.stderr.write("> ")
    sys.stderr.flush()
    line = sys.stdin.readline()
    return {"via": "prompt", "typed": line[:-1] if line.endswith("\n") else line}


def _one_line(text: str) -> str:
    """An error sentence on one line. Its paths were escaped by the backend (`shown`), so only
    what is still not printable is escaped here: escaping it all again would double them."""
    return "".join(c if c.isprintable() else shown(c) for c in text)


def _name(f: MirrorFile) -> str:
    """A path as shown: escaped (the host library's `shown`), a folder with a trailing slash."""
    return shown(f.path) + KIND_SUFFIX.get(f.kind, "")


def _table(console: Console, r: MirrorReport) -> None:
    interesting = [f for f in r.files if f.status not in ("identical", "copied")]
    files = r.plan.files if r.result == "would-copy" and r.plan is not None else r.files
    rows = files if len(files) <= SHOWN else (interesting or list(files))[:SHOWN]
    if not rows:
        return
    t = Table(box=None, pad_edge=False)
    for col in ("status", "path", "bytes", "sha256 src", "sha256 dst"):
        t.add_column(col, justify="right" if col == "bytes" else "left")
    for f in rows:
        size = (
            ""
            if f.kind != "file"
            else size_short(f.bytes)
            if f.bytes_dst is None
            else f"{f.bytes} / {f.bytes_dst}"
        )
        status = "to copy" if r.result == "would-copy" else f.status
        t.add_row(
            f"[{STATUS_STYLE.get(f.status, '')}]{status}[/]",
            escape(_name(f)),
            size,
            (f.sha256_src or "-")[:16],
            (f.sha256_dst or "-")[:16],
        )
    console.print(t)
    if len(rows) < len(files):
        console.print(f"[dim]({len(files) - len(rows)} more not listed)[/]")


def _print(r: MirrorReport) -> None:
    console = Console(highlight=False)
    if r.result != "refused" or r.reason == "dst-differs":  # a refusal is its one sentence
        _table(console, r)
    for path, target in r.outside_links:
        console.print(
            f"[yellow]followed outside SRC[/]: {escape(shown(path))} -> {escape(shown(target))}"
        )
    where = f"{escape(shown(r.src))} -> {escape(shown(r.dst))}"
    rate = f", copied at {size_short(r.rate)}/s" if r.rate else ""
    if r.result == "copied" and r.verified_by:
        console.print(f"[green]copied and verified[/]: {r.verified_by}{rate} ({where})")
    elif r.result == "replaced" and r.verified_by:
        console.print(
            f"[green]replaced and verified[/]: {r.verified_by}, before and after the swap{rate} "
            f"({where})"
        )
        console.print(
            f"the old destination is kept as {escape(shown(r.kept_as or '?'))} on "
            f"{escape(shown(r.dst.split(':', 1)[0]))}; remove it by hand once it is no longer needed"
        )
    elif r.result == "would-replace" and r.plan is not None:
        console.print(
            f"[cyan]dry run[/]: would copy {len(r.plan.files)} files, "
            f"{size_short(r.plan.bytes)} beside the destination, prove them, then put them "
            f"in its place, keeping the old one as <DST>.replaced-<UTC time> ({where})"
        )
    elif r.result == "identical" and r.verified_by:
        console.print(
            f"[green]verified identical[/]: {r.verified_by} ({where})"
            f"{'; nothing to copy' if r.action == 'mirror' else ''}"
        )
    elif r.result == "would-copy" and r.plan is not None:
        p = r.plan
        free = f"; {size_short(p.free_bytes)} free there" if p.free_bytes is not None else ""
        console.print(
            f"[cyan]dry run[/]: would copy {len(p.files)} files in {len(p.dirs)} folders, "
            f"{size_short(p.bytes)} ({where}; the destination "
            f"{'exists, empty' if p.dst_exists else 'is created'}{free})"
        )
    elif r.result == "differs" and r.files:
        console.print(f"[red]not identical[/]: {where}")
    elif r.result == "failed" and r.action == "mirror" and not r.bytes_copied:
        console.print(
            f"[red]failed[/] before any byte was copied ({where}); nothing was put in place"
        )
    elif r.result == "failed" and r.action == "mirror":
        console.print(
            f"[red]failed[/] after relaying {size_short(r.bytes_copied)} of "
            f"{size_short(r.bytes_src)} ({where}); nothing was put in place"
        )
