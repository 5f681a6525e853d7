"""`fleetdeck status` and `fleetdeck runs`: one poll of the fleet, as tables or JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.connect import AUTH_CODES
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import (
    FleetSnapshot,
    HostSnapshot,
    Run,
    run_json,
    unreachable_json,
)
from fleetdeck.backend.fleet.poller import poll_fleet
from fleetdeck.backend.fleet.run_order import ordered_runs
from fleetdeck.backend.fleet.series import fetch_series
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import duration_short, size_short
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.cli.tables import listing_console
from fleetdeck.show.fmt import (
    host_text,
    human_mib,
    matches,
    message_text,
    pace_text,
    progress_text,
    said,
)

STATE_STYLE = {
    "running": "green",
    "finished": "blue",
    "failed": "red",
    "stalled": "yellow",
    "queued": "cyan",
    "cancelled": "magenta",
    "unknown": "dim",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="one poll of the fleet: GPUs, runs, schedules, disks")
    add_hosts_option(p)
    p.add_argument("--host", action="append", metavar="NAME", help="only this host (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--filter", metavar="TEXT", help="only hosts whose row shows TEXT (any case)")
    p.set_defaults(func=run_status)
    p = sub.add_parser("runs", help="training runs on every host")
    add_hosts_option(p)
    p.add_argument("--host", action="append", metavar="NAME", help="only this host (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--filter", metavar="TEXT", help="only runs whose row shows TEXT (any case)")
    p.add_argument(
        "--series",
        metavar="HOST:PATH",
        help="one run's whole loss and eval-loss series "
        "(a listing carries at most 256 points of each)",
    )
    p.set_defaults(func=run_runs)


def _poll(args: argparse.Namespace) -> tuple[str, FleetSnapshot]:
    """(where the fleet came from, one poll of it)."""
    fleet = load_fleet(args.hosts)
    for name in args.host or ():
        fleet.host(name)
    # a host named twice is polled and listed once
    return fleet.source, asyncio.run(
        poll_fleet(fleet, list(dict.fromkeys(args.host)) if args.host else None)
    )


#: what a host that could not be asked is called, by its error code (else "is unreachable")
DOWN_WORDS = {
    "auth": "refused our login",
    "key-file": "cannot be logged into",
    "host-key-unknown": "is not trusted yet",
    "host-key-changed": "is not trusted",
}


def _report_down(snap: FleetSnapshot) -> None:
    for h in snap.hosts:
        if not h.reachable:
            what = DOWN_WORDS.get(h.error_code or "", "is unreachable")
            print(f"fleetdeck: {h.name} {what}: {said(h.error)}", file=sys.stderr)


def _host_shows(h: HostSnapshot, needle: str | None) -> bool:
    """What a host's row shows: its name, state, GPUs, disks, live runs and error."""
    return matches(
        needle,
        h.name,
        "up" if h.reachable else "down",
        h.error,
        h.error_code,
        *(g.name for g in h.gpus),
        *(d.path for d in h.disks),
        *(r.name for r in h.runs if r.state in ("running", "stalled")),
    )


def _run_shows(r: Run, needle: str | None) -> bool:
    return matches(needle, r.host, r.name, r.path, r.state, r.reason)


def run_status(args: argparse.Namespace) -> int:
    source, snap = _poll(args)
    if getattr(args, "filter", None):
        snap = replace(snap, hosts=tuple(h for h in snap.hosts if _host_shows(h, args.filter)))
    if args.json:
        print(json.dumps({**snap.to_json(), "fleet": source}, indent=1))
    else:
        console = listing_console()
        head = "fleet from "
        if len(head) + len(source) > console.width:  # one line: the file's tail tells it apart
            source = "…" + source[-(console.width - len(head) - 1) :]
        console.print(head + escape(source), style="dim", no_wrap=True)
        if not snap.hosts and getattr(args, "filter", None):
            console.print(Text(f"no host's row shows {args.filter!r}"))
        else:
            console.print(fleet_table(snap, console.width))
        for h in snap.hosts:
            for w in h.warnings:
                console.print(Text(f"{h.name}: {said(w)}", style="yellow"))
    _report_down(snap)
    return 0 if all(h.reachable for h in snap.hosts) else 1


def run_series(args: argparse.Namespace) -> int:
    """`runs --series HOST:PATH`: one run's whole series, as step / loss / eval-loss lines."""
    host, sep, path = args.series.partition(":")
    if not sep or not path:
        print(
            "fleetdeck: --series takes HOST:PATH (a run's folder, as `runs` lists it)",
            file=sys.stderr,
        )
        return 2
    fleet = load_fleet(args.hosts)
    cfg = fleet.host(host)

    async def go() -> dict:
        async with HostLink(cfg) as link:
            return await fetch_series(link, path)

    try:
        doc = asyncio.run(go())
    except HostError as e:
        print(f"fleetdeck: {host}: {said(e.message)} ({e.code})", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    evals = dict((s, v) for s, v in doc["eval_losses"])
    steps = sorted(set(s for s, _ in doc["losses"]) | set(evals))
    train = dict((s, v) for s, v in doc["losses"])
    print(f"{'step':>8}  {'loss':>10}  {'eval_loss':>10}")
    for s in steps:
        a = f"{train[s]:.4f}" if s in train else "-"
        b = f"{evals[s]:.4f}" if s in evals else "-"
        print(f"{s:>8}  {a:>10}  {b:>10}")
    for w in doc["warnings"]:
        print(f"fleetdeck: {host}: {said(w)}", file=sys.stderr)
    return 0


def run_runs(args: argparse.Namespace) -> int:
    if getattr(args, "series", None):
        return run_series(args)
    _, snap = _poll(args)
    if args.filter:
        snap = replace(
            snap,
            hosts=tuple(
                replace(h, runs=tuple(r for r in h.runs if _run_shows(r, args.filter)))
                for h in snap.hosts
            ),
        )
    if args.json:
        doc = {
            "runs": [run_json(r) for r in ordered_runs(snap.runs, [h.name for h in snap.hosts])],
            "unreachable": [
                unreachable_json(h.name, h.error, h.error_code)
                for h in snap.hosts
                if not h.reachable
            ],
        }
        print(json.dumps(doc, indent=1))
    else:
        if args.filter and not snap.runs:
            listing_console().print(Text(f"no run's row shows {args.filter!r}"))
        else:
            listing_console().print(runs_table(snap))
    _report_down(snap)
    return 0 if all(h.reachable for h in snap.hosts) else 1


def _gpu_cell(h: HostSnapshot) -> Text:
    if not h.gpus:
        return Text("no GPU", style="dim")
    parts = []
    for g in h.gpus:
        if g.lost is not None:
            parts.append(Text.assemble(f"{g.index}: ", host_text(f"LOST ({g.lost})", "bold red")))
            continue
        mark = " (unified)" if g.unified_memory else ""
        used_mib, total_mib = g.memory_used_mib, g.memory_total_mib
        pct = f"{100 * used_mib / total_mib:.0f}%" if used_mib is not None and total_mib else "?%"
        used = "?" if g.memory_used_mib is None else human_mib(g.memory_used_mib)
        total = "?" if g.memory_total_mib is None else human_mib(g.memory_total_mib)
        parts.append(Text(f"{g.index}: {used}/{total} {pct}{mark}"))
    return Text("\n").join(parts)


def _disk_cell(h: HostSnapshot) -> Text:
    parts = []
    for d in h.disks:
        if d.error and d.total_bytes:
            # a root that does not exist yet: the probe measured its nearest existing parent
            parts.append(Text.assemble(("missing", "yellow"), f" {shown(d.path)}"))
        elif d.error:
            parts.append(Text.assemble(host_text(d.error, "red"), f" {shown(d.path)}"))
        else:
            pct = 100 * d.used_bytes / d.total_bytes if d.total_bytes else 0
            parts.append(Text(f"{size_short(d.free_bytes)} free {pct:.0f}% {shown(d.path)}"))
    return Text("\n").join(parts) if parts else Text("-")


def fleet_table(snap: FleetSnapshot, width: int = 80) -> Table:
    """One row per host: reachability, GPU memory per GPU, disks, live runs, stray schedules.

    One line per GPU, disk or live run, never a cell wrapped over lines. Below 100 columns
    latency and load go first (`--json` has them); the long entries are cut with an ellipsis.
    Every cell is `Text` and host text in it went through `shown`: nothing is read as markup.
    """
    wide = width >= 100
    t = Table(title="fleet", expand=False, box=box.SIMPLE_HEAD, pad_edge=False)
    short = ("host", "up", "latency", "load", "memory") if wide else ("host", "up", "memory")
    host_w = max([4, *(len(h.name) for h in snap.hosts)])  # a host's name is never cut
    fixed = {"host": host_w, "up": 4, "latency": 7, "load": 5, "memory": 11}
    # what is left for the long columns, after the short ones, stray and the gaps between
    rest = max(24, width - 1 - sum(fixed[c] for c in short) - 5 - 2 * (len(short) + 3))
    for col in short:
        t.add_column(col, no_wrap=True, min_width=fixed[col] if col != "memory" else len(col))
    t.add_column("GPU memory", no_wrap=True, overflow="ellipsis", max_width=rest * 3 // 10)
    t.add_column("disks", no_wrap=True, overflow="ellipsis", max_width=rest * 4 // 10)
    t.add_column("runs", no_wrap=True, overflow="ellipsis", max_width=rest - rest * 7 // 10)
    t.add_column("stray", no_wrap=True, min_width=5)
    for h in snap.hosts:
        if not h.reachable:
            # a refused login waits for the operator (keys, config), not for the host
            state = Text("AUTH" if h.error_code in AUTH_CODES else "DOWN", style="red")
            blanks = ["-"] * (len(short) - 2)
            # runs and stray are unknown, never 0
            t.add_row(h.name, state, *blanks, message_text(h.error or "", "red"), "", "-", "-")
            continue
        live = ordered_runs(r for r in h.runs if r.state in ("running", "stalled"))
        failed = sum(1 for r in h.runs if r.state == "failed")
        lines = [
            Text.assemble(
                host_text(r.name, STATE_STYLE[r.state]), f" {progress_text(r.step, r.max_steps)}"
            )
            for r in live
        ]
        if failed:  # never folded into "idle": `fleetdeck runs` says why
            lines.append(Text(f"{failed} failed", style=STATE_STYLE["failed"]))
        runs = Text("\n").join(lines) if lines else Text(f"{len(h.runs)} idle", style="dim")
        stray = sum(1 for s in h.schedules if s.stray)
        minor = (
            [
                f"{h.latency_ms:.0f}ms" if h.latency_ms is not None else "-",
                f"{h.load1:.2f}" if h.load1 is not None else "-",
            ]
            if wide
            else []
        )
        t.add_row(
            h.name,
            Text("up", style="green"),
            *minor,
            f"{size_short(h.memory_used_bytes)}/{size_short(h.memory_total_bytes)}",
            _gpu_cell(h),
            _disk_cell(h),
            runs,
            Text(str(stray), style="yellow" if stray else ""),
        )
    return t


def runs_table(snap: FleetSnapshot) -> Table:
    """Every run in the fleet with state, progress, speed, ETA and the last eval losses: live
    runs first, then by host and by name in natural order (`run_order`)."""
    t = Table(title="runs", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("host", no_wrap=True)
    t.add_column("run", min_width=10)
    for col in ("state", "step", "s/step", "ETA", "loss"):
        t.add_column(col, no_wrap=True)
    t.add_column("eval (last 3)")
    for r in ordered_runs(snap.runs, [h.name for h in snap.hosts]):
        evals = " ".join(f"{v:.3f}" for _, v in r.eval_losses[-3:]) or "-"
        state = Text(r.state, style=STATE_STYLE.get(r.state, ""))
        if r.state == "finished" and not r.adapter:
            state.append(" (no adapter)", style="red")
        step = "-" if r.step is None else f"{r.step}/{r.max_steps}" if r.max_steps else str(r.step)
        t.add_row(
            r.host,
            host_text(r.name),
            state,
            step,
            pace_text(r.state, r.seconds_per_step),
            duration_short(r.eta_seconds, "-"),
            f"{r.loss:.3f}" if r.loss is not None else "-",
            evals,
        )
        if r.reason and r.state not in ("running", "finished"):
            t.add_row("", host_text(r.reason, "dim"), "", "", "", "", "", "")
    return t
