"""`fleetdeck schedules ack`: acknowledge ids seen in a fresh poll (on the host listing each,
or everywhere), or every schedule of the named hosts; refuse, storing nothing, on an id that is
unknown or ambiguous. Each refusal is audited."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from fleetdeck.backend.actions import schedule_ack
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.schedule_poll import host_names, poll, sentence, unreachable


def _ack_refused(ids: list[str], code: str, msg: str, **extra: Any) -> int:
    schedule_ack.refused(ids, code, msg, via="cli", **extra)
    print(f"fleetdeck: {msg}", file=sys.stderr)
    return 1


def cmd_ack(args: argparse.Namespace) -> int:
    """Acknowledge ids seen in a fresh poll, on the host listing each (or, with --all-hosts, on
    every host); refuse (exit 1, nothing stored) if any id is unknown or, on several hosts,
    ambiguous."""
    if args.ack_all or not args.ids:
        return _ack_all(args)
    fleet = load_fleet(args.hosts)
    wanted = host_names(fleet, args.host_filter)
    snap = poll(fleet, None)
    ids = list(dict.fromkeys(args.ids))
    where: dict[str, list[str]] = {}
    for s in snap.schedules:
        if s.id in ids and (not wanted or s.host in wanted) and s.host not in where.get(s.id, []):
            where.setdefault(s.id, []).append(s.host)
    unknown = [i for i in ids if i not in where]
    if unknown:
        down = unreachable(snap)
        on = f" on {', '.join(wanted)}" if wanted else ""
        why = f" (unreachable: {', '.join(d[0] for d in down)})" if down else ""
        return _ack_refused(
            ids,
            "not-found",
            f"no schedule with id {', '.join(shown(i) for i in unknown)}{on} "
            f"in a fresh listing{why}; nothing was acknowledged",
            unknown=[shown(i) for i in unknown],
        )
    if not args.all_hosts and not wanted:
        many = {i: hs for i, hs in where.items() if len(hs) > 1}
        if many:
            i, hs = next(iter(many.items()))
            return _ack_refused(
                ids,
                "ambiguous",
                f"{shown(i)} is listed on {', '.join(hs)}: name the host with "
                "--host NAME, or cover every host with --all-hosts; nothing was acknowledged",
            )
    if args.all_hosts:
        schedule_ack.acknowledge(everywhere=ids, via="cli")
    else:
        schedule_ack.acknowledge(on_host=[(h, i) for i in ids for h in where[i]], via="cli")
    scope = (
        "on every host"
        if args.all_hosts
        else "on " + ", ".join(sorted({h for i in ids for h in where[i]}))
    )
    Console().print(
        Text(f"acknowledged {len(ids)} schedule(s) {scope}: {', '.join(shown(i) for i in ids)}")
    )
    return 0


def _ack_all(args: argparse.Namespace) -> int:
    """`ack --host H --all`: acknowledge, on each named host, every schedule a fresh poll lists
    there as unacknowledged (exit 1 when a named host cannot be asked; nothing is stored then)."""
    if not args.ack_all or args.ids or not args.host_filter or args.all_hosts:
        print(
            "fleetdeck: schedules ack: give ids, or --host NAME --all (without ids) to acknowledge every "
            "unacknowledged schedule of that host",
            file=sys.stderr,
        )
        return 2
    fleet = load_fleet(args.hosts)
    wanted = host_names(fleet, args.host_filter) or []
    snap = poll(fleet, None)
    down = [d for d in unreachable(snap) if d[0] in wanted]
    if down:
        return _ack_refused(
            [],
            "host-unreachable",
            f"{down[0][0]} is unreachable ({sentence(down[0][1])}); nothing was acknowledged",
            hosts=wanted,
        )
    pairs = sorted(
        {
            (s.host, s.id)
            for s in snap.schedules
            if s.host in wanted and "unacknowledged" in s.reasons
        }
    )
    schedule_ack.acknowledge(on_host=pairs, via="cli", host=", ".join(wanted), all=True)
    for h in wanted:
        n = sum(1 for hh, _ in pairs if hh == h)
        Console().print(
            Text(
                f"{h}: acknowledged {n} schedule{'' if n == 1 else 's'}"
                if n
                else f"{h}: no unacknowledged schedule to acknowledge"
            )
        )
    return 0
