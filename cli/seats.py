"""`fleetdeck seats`: serving seats on every host, card headroom, and `seats check HOST PORT`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.monitor.seats import SeatCheck, check_seat, record_check, seats_for
from fleetdeck.cli.args import add_hosts_option
from fleetdeck.show.fmt import host_text, human_mib, matches, said, shown


def register(sub: argparse._SubParsersAction) -> None:
    """Add `seats [--host NAME]... [--json]` and `seats check HOST PORT [--json]`."""
    p = sub.add_parser(
        "seats",
        help="serving seats (vLLM, SGLang, TGI, llama.cpp, Ollama) on every host",
        description="List every serving seat on the fleet with its port, model, GPUs, "
        "memory held and memory flags, and each card's headroom.",
    )
    add_hosts_option(p)
    p.add_argument(
        "--host",
        action="append",
        dest="host_filter",
        metavar="NAME",
        help="only this host (repeatable)",
    )
    p.add_argument("--json", action="store_true", help='print {"seats": [...], "headroom": [...]}')
    p.add_argument("--filter", metavar="TEXT", help="only seats whose row shows TEXT (any case)")
    p.set_defaults(func=cmd_list)
    acts = p.add_subparsers(dest="seats_action", metavar="ACTION")
    c = acts.add_parser(
        "check",
        help="one small completion with logprobs, sent from the host itself",
        description="List the seat's models, then ask for one short completion with "
        "logprobs, from the host (127.0.0.1). Exit 0 only when the content and every "
        "logprob are sound; otherwise the failure signature is named.",
    )
    add_hosts_option(c)
    c.add_argument("target_host", metavar="HOST")
    c.add_argument("port", type=int, metavar="PORT")
    c.add_argument("--model", help="model id to ask (default: the first /v1/models lists)")
    c.add_argument(
        "--timeout", type=float, default=20.0, metavar="SECONDS", help="per request (default 20)"
    )
    c.add_argument(
        "--max-tokens", type=int, default=8, metavar="N", help="completion length (default 8)"
    )
    c.add_argument("--json", action="store_true", help="print the verdict as JSON")
    c.set_defaults(func=cmd_check)


def cmd_list(args: argparse.Namespace) -> int:
    """Print the fleet's seats and headroom; exit 1 when a host could not be asked."""
    fleet = load_fleet(args.hosts)
    names = list(dict.fromkeys(args.host_filter)) if args.host_filter else None
    for n in names or ():
        fleet.host(n)
    found = asyncio.run(seats_for(fleet, names))
    if args.filter:
        found = dict(
            found,
            seats=[
                s
                for s in found["seats"]
                if matches(args.filter, s.host, s.name, s.kind, s.port, s.model, " ".join(s.flags))
            ],
        )
    if args.json:
        print(
            json.dumps(
                {
                    "seats": [s.to_json() for s in found["seats"]],
                    "headroom": [h.to_json() for h in found["headroom"]],
                    "unreachable": found["unreachable"],
                },
                indent=1,
            )
        )
    else:
        console = Console(soft_wrap=False)
        if not found["seats"]:
            asked = len(names) if names else len(fleet.hosts)
            console.print(
                Text(
                    f"no serving seat shows {args.filter!r}"
                    if args.filter
                    else f"no serving seat found on the {asked} host{'s' if asked != 1 else ''} asked "
                    "(vLLM, SGLang, TGI, llama.cpp and Ollama are looked for)"
                )
            )
        t = Table(title="seats")
        for col in ("host", "seat", "kind", "port", "model", "GPUs", "memory", "flags", "restarts"):
            t.add_column(col, overflow="fold")
        for s in found["seats"]:
            restarts = "-" if s.restarts is None else str(s.restarts)
            if s.oom_killed:
                restarts += " OOM"
            # the seat's name, model and flags are read from its argv and container on the host
            t.add_row(
                s.host,
                host_text(s.name),
                host_text(s.kind),
                str(s.port or "-"),
                host_text(s.model or "-"),
                ",".join(map(str, s.gpus)) or "-",
                human_mib(s.memory_mib) if s.memory_mib else "-",
                host_text(" ".join(f"{k}={v}" if v else k for k, v in s.flags.items()) or "-"),
                restarts,
            )
        if found["seats"]:
            console.print(t)
        for h in found["headroom"]:
            shares = ", ".join(f"{shown(n)} {human_mib(m)}" for n, m in h.shares) or "no seat"
            console.print(
                Text(
                    f"{h.host} GPU{h.gpu}: headroom {human_mib(h.free_mib)} of "
                    f"{human_mib(h.total_mib)} ({shares})"
                )
            )
    for u in found["unreachable"]:
        print(f"fleetdeck: {u['name']}: {said(u['error'])}", file=sys.stderr)
    return 1 if found["unreachable"] else 0


def cmd_check(args: argparse.Namespace) -> int:
    """Check one seat; exit 0 only when it is sound."""
    fleet = load_fleet(args.hosts)
    fleet.host(args.target_host)
    if not 0 < args.port < 65536:
        print("fleetdeck: seats check: PORT must be between 1 and 65535", file=sys.stderr)
        return 2

    async def go() -> SeatCheck:
        poller = Poller(fleet)
        try:
            return await check_seat(
                poller.link(args.target_host), args.port, args.model, args.timeout, args.max_tokens
            )
        finally:
            await poller.close()

    try:
        res = asyncio.run(go())
    except HostError as e:
        print(f"fleetdeck: {said(e)}", file=sys.stderr)
        return 1
    record_check(res)  # `alerts` and `watch` judge the seat-check rule from the last verdict
    if args.json:
        print(json.dumps(res.to_json(), indent=1))
    elif res.sound:
        print(f"{res.host}:{res.port}: sound: {said(res.message)}")
    if not res.sound:
        print(
            f"fleetdeck: {res.host}:{res.port}: {said(res.signature)}: {said(res.message)}",
            file=sys.stderr,
        )
    return 0 if res.sound else 1
