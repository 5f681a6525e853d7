"""`fleetdeck schedules remove HOST ID`: what will be removed shown, the id typed back (or
given with --confirm), then the backend's checked and audited removal; exit 0 only when it was
done and verified."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.console import Console
from rich.text import Text

from fleetdeck.backend.actions.audit_records import RemoveRecord, write
from fleetdeck.backend.actions.schedules import (
    check_removal,
    describe_removal,
    remove_schedule,
)
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Schedule
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.schedule_poll import poll, sentence


def cmd_remove(args: argparse.Namespace) -> int:
    """Remove one schedule after the id was typed back; exit 0 only when done and verified."""
    fleet = load_fleet(args.hosts)
    host_cfg = fleet.host(args.target_host)
    sid = args.schedule_id
    snap = poll(fleet, [host_cfg.name])
    hs = snap.hosts[0] if snap.hosts else None
    if hs is None or not hs.reachable:
        err = hs.error if hs else "no answer"
        return _refused(
            args,
            host_cfg.name,
            sid,
            "host-unreachable",
            err,
            f"{host_cfg.name} is unreachable: {err}",
        )
    sched = next((s for s in hs.schedules if s.id == sid), None)
    if sched is None:
        msg = f"no schedule with id {shown(sid)} on {host_cfg.name} in a fresh listing; nothing was changed"
        return _refused(args, host_cfg.name, sid, "not-found", msg, msg)
    confirmation = args.confirm
    if confirmation is None and sys.stdin.isatty():
        confirmation = _prompt(host_cfg, sched, args.grace)
    rep = asyncio.run(_remove(host_cfg, sched, confirmation, args.grace))
    if args.json:
        print(json.dumps(rep.to_json()))
    if not rep.ok:
        verb = "refused to remove" if rep.result == "refused" else "failed to remove"
        print(
            f"fleetdeck: {verb} {shown(sid)} on {host_cfg.name} ({rep.reason_code}): {sentence(rep.message)}",
            file=sys.stderr,
        )
        return 1
    if not args.json:
        out = Console()
        out.print(Text(f"{host_cfg.name}: {sentence(rep.message)}", style="green"))
        if rep.backup:
            out.print(Text(f"backup on this machine: {rep.backup}"))
        if rep.host_backup:
            out.print(Text(f"backup on {host_cfg.name}: {shown(rep.host_backup)}"))
    return 0


def _refused(
    args: argparse.Namespace, host: str, sid: str, code: str, recorded: str | None, message: str
) -> int:
    """A removal refused before the host was asked: audited (`recorded`), then said."""
    write(
        RemoveRecord(
            host=host,
            result="refused",
            schedule={"id": sid},
            confirmation=args.confirm,
            reason_code=code,
            message=recorded,
        )
    )
    doc = {
        "host": host,
        "id": sid,
        "removed": False,
        "result": "refused",
        "reason_code": code,
        "message": message,
    }
    if args.json:
        print(json.dumps(doc))
    print(
        f"fleetdeck: refused to remove {shown(sid)} on {host} ({code}): {sentence(message)}",
        file=sys.stderr,
    )
    return 1


async def _remove(host_cfg, sched: Schedule, confirmation: str | None, grace: float):
    link = HostLink(host_cfg)
    try:
        return await remove_schedule(link, sched, confirmation, grace=grace)
    finally:
        await link.close()


async def _check(host_cfg, sched: Schedule):
    link = HostLink(host_cfg)
    try:
        return await check_removal(link, sched)
    finally:
        await link.close()


def _prompt(host_cfg, sched: Schedule, grace: float) -> str | None:
    """Show what will be removed (and what the host says about it now); read the id typed back."""
    err = Console(stderr=True)
    err.print(Text(f"Remove from {host_cfg.name}: {sched.kind} {shown(sched.id)}", style="bold"))
    for label, value in (
        ("user", sched.user),
        ("spec", sched.spec),
        ("command", sched.command),
        ("source", sched.source),
        ("line", sched.raw),
        ("pid", sched.pid and str(sched.pid)),
    ):
        if value:
            err.print(Text(f"  {label}: {shown(str(value))}"))
    # the sentence names the entry's user, file, unit or job as the host gave them
    err.print(Text(f"  it will: {shown(describe_removal(sched, grace))}"))
    check = asyncio.run(_check(host_cfg, sched))
    if not check.ok:
        err.print(Text(f"  the host says: {sentence(check.message)}", style="yellow"))
    for c in check.children:
        err.print(Text(f"  also stops: pid {c.get('pid')} {shown(str(c.get('command') or ''))}"))
    if check.warning:
        err.print(Text(f"  WARNING: {sentence(check.warning)}", style="bold red"))
    try:
        return input("Type the id to confirm: ")
    except EOFError:
        return None
