"""`fleetdeck proposals [--json]`, `proposals show ID`, `proposals confirm ID` and `proposals
reject ID`: what agents proposed over `fleetdeck mcp`, carried out or turned down by a person.

`confirm` judges the proposal again first (`proposal_plans.rejudge`: the plan made again on the
host now; a fact that moved since it was proposed refuses it, `facts-changed`), then runs the
action's own command with the proposal's arguments, so the confirmation is the one the command
asks today: each path typed back for a purge, the id for a schedule removal (on a terminal, or
given with `--confirm`); a mirror or a launch, which ask for nothing typed, take the proposal's
id typed back. Every step is audited with the proposal's origin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.proposals import Proposal, ProposalError, ProposalStore
from fleetdeck.backend.fleet.config import ConfigError, load_fleet
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli import launch, mirror, purge, schedules
from fleetdeck.cli.args import Parser, add_hosts_option
from fleetdeck.cli.purge_print import show_plan
from fleetdeck.show.fmt import said

if TYPE_CHECKING:
    from fleetdeck.backend.actions.proposal_plans import Planned


def register(sub: argparse._SubParsersAction) -> None:
    """Add `proposals` and its actions to the command line."""
    p = sub.add_parser(
        "proposals",
        help="actions agents proposed over `fleetdeck mcp`: list, show, confirm, reject",
        description="List the proposals agents recorded through `fleetdeck mcp` (who proposed "
        "what and why), show one, carry one out through the action's own typed confirmation "
        "(the plan is made again on the host first), or reject one. A proposal expires 24 "
        "hours after it was made.",
    )
    add_hosts_option(p)
    p.add_argument("--json", action="store_true", help='print {"proposals": [...]}')
    p.set_defaults(func=cmd_list)
    acts = p.add_subparsers(dest="proposals_action", metavar="ACTION")
    s = acts.add_parser("show", help="one proposal in full: origin, reason, plan, outcome")
    c = acts.add_parser(
        "confirm",
        help="carry one out: judged again on the host, then the action's typed confirmation",
        description="Judge the proposal again (the plan made on the host now; refused when a "
        "fact changed since it was proposed), then run the action with the proposal's "
        "arguments and its own confirmation: a purge's paths, a schedule's id; a mirror's or a "
        "launch's proposal id. On a terminal it prompts; else give --confirm (once per path).",
    )
    r = acts.add_parser("reject", help="turn one down; the agent reads that it was rejected")
    for q in (s, c, r):
        add_hosts_option(q)
        q.add_argument("id", metavar="ID")
        q.add_argument("--json", action="store_true", help="print one JSON document")
    c.add_argument(
        "--confirm",
        action="append",
        default=[],
        metavar="TEXT",
        help="what the confirmation asks to be typed (a path, a schedule id, the proposal id)",
    )
    s.set_defaults(func=cmd_show)
    c.set_defaults(func=cmd_confirm)
    r.set_defaults(func=cmd_reject)


def _fail(args: argparse.Namespace, code: str, message: str, pid: str, status: int = 1) -> int:
    if args.json:
        print(json.dumps({"id": pid, "ok": False, "code": code, "message": message}, indent=1))
    print(f"fleetdeck: proposal {shown(pid)}: {said(message)} [{code}]", file=sys.stderr)
    return status


def _get(args: argparse.Namespace, store: ProposalStore) -> Proposal | int:
    try:
        return store.get(args.id)
    except ProposalError as e:
        return _fail(args, e.code, e.message, args.id, 2 if e.code == "bad-id" else 1)


def who(p: Proposal) -> str:
    """Who proposed it, in words: `mcp (client-name)`."""
    o = p.origin
    client = o.get("client")
    return f"{shown(str(o.get('via', '?')))}" + (f" ({shown(str(client))})" if client else "")


def cmd_list(args: argparse.Namespace) -> int:
    """Every kept proposal, newest first; unreadable files named. Exit 0."""
    store = ProposalStore()
    found = store.load()
    now = time.time()
    if args.json:
        doc = {
            "proposals": [
                {k: v for k, v in p.to_json(now).items() if k not in ("plan", "facts")}
                for p in found
            ],
            "problems": store.problems,
        }
        print(json.dumps(doc, indent=1))
        return 0
    out = Console(highlight=False)
    if not found:
        out.print("no proposals")
    else:
        t = Table(box=None, header_style="bold")
        for col in ("id", "state", "kind", "host", "by", "what", "why"):
            t.add_column(col)
        for p in found:
            t.add_row(
                p.id,
                p.state_at(now),
                p.kind,
                shown(p.host),
                Text(who(p)),
                Text(shown(p.summary)),
                Text(shown(p.reason)[:120]),
            )
        out.print(t)
    for problem in store.problems:
        out.print(Text(f"unreadable: {shown(problem)}", style="yellow"))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """One proposal in full (with its plan); exit 1 when there is no such one."""
    got = _get(args, ProposalStore())
    if isinstance(got, int):
        return got
    doc = got.to_json()
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    out = Console(highlight=False)
    out.print(Text(f"proposal {got.id}: {shown(got.summary)}", style="bold"))
    for label, value in (
        ("state", doc["state"]),
        ("proposed by", who(got)),
        ("why", shown(got.reason)),
        ("made", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(got.created))),
        ("expires", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(got.expires))),
        ("arguments", shown(json.dumps(got.args, ensure_ascii=True))),
    ):
        out.print(Text(f"  {label}: {value}"))
    if got.outcome:
        out.print(Text(f"  outcome: {shown(json.dumps(got.outcome, ensure_ascii=True))}"))
    out.print(Text("  plan (as checked when proposed):"))
    out.print(Text(shown(json.dumps(got.plan, indent=1, ensure_ascii=True)), style="dim"))
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    """Turn a pending proposal down (audited); exit 1 when it is not pending."""
    store = ProposalStore()
    got = _get(args, store)
    if isinstance(got, int):
        return got
    state = got.state_at(time.time())
    if state != "pending":
        return _fail(args, "settled", f"it is {state}, not pending", got.id)
    try:
        done = store.settle(
            got, "rejected", _person(), code="rejected", message="a person rejected it"
        )
    except (audit.AuditError, ProposalError) as e:
        return _fail(args, getattr(e, "code", "unwritable"), str(getattr(e, "message", e)), got.id)
    if args.json:
        print(json.dumps({k: v for k, v in done.to_json().items() if k != "plan"}, indent=1))
    else:
        Console(highlight=False).print(Text(f"rejected proposal {done.id}: {shown(done.summary)}"))
    return 0


def _person() -> str:
    return audit.user()


def run_command(argv: list[str]) -> int:
    """Run one of the actions' own commands (`purge`, `mirror`, `launch`, `schedules remove`)
    as `fleetdeck ARGV` would: its parser, its confirmation, its exit status."""
    parser = Parser(prog="fleetdeck")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in (purge, mirror, launch, schedules):
        mod.register(sub)
    ns = parser.parse_args(argv)
    try:
        return int(ns.func(ns) or 0)
    except ConfigError as e:
        print(f"fleetdeck: {e}", file=sys.stderr)
        return 2


def command_for(p: Proposal, args: argparse.Namespace, typed: list[str]) -> list[str]:
    """The fleetdeck command line that carries `p` out, with `args`'s --hosts and --json and
    what was `typed` as the command's own --confirm (a purge path that starts with '-' goes
    after '--', as the command asks)."""
    hosts = ["--hosts", args.hosts] if args.hosts else []
    js = ["--json"] if args.json else []
    a = p.args
    if p.kind == "purge":
        keep = ["--keep-newest", str(a["keep_newest"])] if a.get("keep_newest") else []
        conf = [f"--confirm={c}" for c in typed]
        return ["purge", *hosts, *js, *keep, *conf, p.host, "--", *a["paths"]]
    if p.kind == "remove-schedule":
        return ["schedules", "remove", *hosts, *js, f"--confirm={typed[0]}", p.host, "--", a["id"]]
    if p.kind == "mirror":
        return ["mirror", *hosts, *js, a["src"], a["dst"]]
    after = ["--after", a["after"]] if a.get("after") else []
    return ["launch", *hosts, *js, *after, p.host, "--", a["run_toml"]]


def to_type(p: Proposal, planned: Planned) -> tuple[str, list[str]]:
    """What the person types to carry `p` out, as its action asks today: (what it is, the
    texts). A purge's paths (the run under the keep rule), a schedule's id; a mirror or a
    launch, which ask for nothing typed, the proposal's id."""
    if p.kind == "purge":
        what = "the run" if p.args.get("keep_newest") else "the path to delete"
        return what, list(planned.typed.confirm_texts())
    if p.kind == "remove-schedule":
        return "the schedule's id", [str(p.args["id"])]
    return "the proposal's id", [p.id]


def _prompt(p: Proposal, planned: Planned, what: str, texts: list[str]) -> list[str]:
    """Show the plan as made now and read each text typed back; stops at the first mismatch."""
    err = Console(stderr=True, highlight=False)
    if p.kind == "purge":
        show_plan(err, planned.typed)
    err.print(Text(f"{shown(p.summary)}\nproposed by {who(p)}: {shown(p.reason)}"))
    typed: list[str] = []
    for want in texts:
        if not want.isprintable():
            err.print(Text(f"{shown(want)} cannot be typed at a prompt; use --confirm=TEXT"))
            return typed
        err.print(Text.assemble(f"Type {what} ", (shown(want), "bold"), " exactly:"))
        try:
            line = input("> ")
        except EOFError:
            return typed
        typed.append(line)
        if line != want:
            return typed
    return typed


def cmd_confirm(args: argparse.Namespace) -> int:
    """Judge again, confirm as the action asks, carry out; exit as the action's command exits,
    1 when the proposal no longer stands or the confirmation did not match (it then still
    waits), 2 for a bad id."""
    # deferred: actions.proposal_plans (it loads the launch helper, ~50 ms at every start of the CLI)
    from fleetdeck.backend.actions.proposal_plans import rejudge

    store = ProposalStore()
    got = _get(args, store)
    if isinstance(got, int):
        return got
    fleet = load_fleet(args.hosts)
    verdict = asyncio.run(rejudge(fleet, got, time.time()))
    person = _person()
    if not verdict.ok:
        code, message = verdict.code or "refused", verdict.message or "it no longer stands"
        if verdict.final and got.state_at(time.time()) in ("pending", "expired"):
            try:
                store.settle(
                    got,
                    "refused" if code != "expired" else "expired",
                    person,
                    code=code,
                    message=message,
                )
            except (audit.AuditError, ProposalError) as e:
                message += f" (its outcome could not be recorded: {getattr(e, 'message', e)})"
        return _fail(args, code, message, got.id)
    assert verdict.planned is not None  # a proposal that stands has its plan made now
    what, texts = to_type(got, verdict.planned)
    typed = list(args.confirm)
    if not typed and sys.stdin.isatty():
        typed = _prompt(got, verdict.planned, what, texts)
    if sorted(typed) != sorted(texts):
        # a mistyped confirmation changes nothing: the proposal still waits
        shown_typed = ", ".join(shown(t) for t in typed) or "nothing"
        msg = f"the confirmation did not match: typed {shown_typed} for {what}; nothing was done"
        audit.audit(
            "proposal",
            got.host,
            "not-confirmed",
            proposal=got.id,
            kind=got.kind,
            origin=got.origin,
            typed=typed,
        )
        return _fail(args, "not-confirmed", msg, got.id)
    argv = command_for(got, args, typed)
    try:
        # the claim: from here on no one else can carry it out
        started = store.settle(
            got, "confirmed", person, code="confirmed", message="carried out by a person"
        )
    except (audit.AuditError, ProposalError) as e:
        code = getattr(e, "code", "unwritable")
        return _fail(args, code, f"{getattr(e, 'message', e)}; nothing was done", got.id)
    token = audit.FOR_PROPOSAL.set({"id": got.id, "origin": got.origin})
    try:
        status = run_command(argv)
    finally:
        audit.FOR_PROPOSAL.reset(token)
    try:
        store.settle(
            started,
            "done" if status == 0 else "failed",
            person,
            code="done" if status == 0 else "action-failed",
            message=f"`fleetdeck {argv[0]}` exited {status}",
            exit=status,
        )
    except (audit.AuditError, ProposalError) as e:
        print(
            f"fleetdeck: proposal {got.id}: its outcome could not be recorded: "
            f"{said(str(getattr(e, 'message', e)))}",
            file=sys.stderr,
        )
        return status or 1
    return status
