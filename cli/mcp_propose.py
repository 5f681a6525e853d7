"""The plan tools `fleetdeck mcp` offers: an agent proposes, a person types.

Each `propose_*` tool runs its action's full pre-flight (`proposal_plans.make_plan`: the same
functions the CLI's dry run and plan use) and answers the plan with its witnesses. When every
check passed it also records a proposal (`backend/actions/proposals.py`) and answers its id; a
person carries it out later with `fleetdeck proposals confirm ID` or the dashboard's Proposals
view, through the action's own typed confirmation, after the plan was made again on the host.
A plan that is refused is answered with its reason codes and records nothing.

No tool here deletes, copies, starts or stops anything, whatever its arguments: the only thing
written is the proposal in the controller's state folder, and its audit record.
`proposal_status` and `proposals` read what became of them.
"""

from __future__ import annotations

import time
from typing import Any

from fleetdeck.backend.actions.proposals import (
    REASON_MAX,
    TTL_S,
    Proposal,
    ProposalError,
    ProposalStore,
)
from fleetdeck.backend.fleet.config import ConfigError, Fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.cli.mcp_tools import LIST_MAX, answer, clamp, refused

#: what a person does with a proposal, as the answer says it
HOW = (
    "nothing was done: a person carries this out with `fleetdeck proposals confirm {id}` (or "
    "the dashboard's Proposals view), typing the confirmation the action asks for; the plan is "
    "made again on the host at that moment. Read the outcome with proposal_status."
)


def origin_of(ctx: Any) -> dict[str, Any]:
    """Who is asking: `{"via": "mcp", "client": name, "client_version": version}` as the
    client named itself when it connected (escaped and bounded; None when it did not say)."""
    info = None
    try:
        params = ctx.session.client_params if ctx is not None else None
        info = getattr(params, "client_info", None) if params is not None else None
    except (AttributeError, LookupError, RuntimeError):
        info = None
    name = getattr(info, "name", None)
    version = getattr(info, "version", None)
    return {
        "via": "mcp",
        "client": shown(str(name))[:100] if name else None,
        "client_version": shown(str(version))[:40] if version else None,
    }


def status_json(p: Proposal, now: float) -> dict[str, Any]:
    """A proposal as the agent reads it back: no plan, its state and outcome."""
    return {
        "id": p.id,
        "kind": p.kind,
        "host": p.host,
        "summary": p.summary,
        "state": p.state_at(now),
        "created": p.created,
        "expires": p.expires,
        "origin": p.origin,
        "outcome": p.outcome,
    }


class ProposalTools:
    """The plan tools over one fleet; a method's name is its tool's name, its docstring the
    tool's description."""

    def __init__(self, fleet: Fleet, store: ProposalStore | None = None) -> None:
        self.fleet = fleet
        self.store = store or ProposalStore()

    async def _propose(
        self, kind: str, host: str, args: dict[str, Any], reason: str, ctx: Any
    ) -> str:
        # deferred: actions.proposal_plans (it loads the launch helper, ~50 ms at every start of the CLI)
        from fleetdeck.backend.actions.proposal_plans import PlanRefused, make_plan

        about = {"kind": kind, "args": args}
        why = " ".join(str(reason or "").split())
        if not why:
            return refused("no-reason", "say why, in `reason`: the person reads it", **about)
        if len(why) > REASON_MAX:
            return refused(
                "bad-arguments", f"a reason holds at most {REASON_MAX} characters", **about
            )
        try:
            self.fleet.host(host)
        except ConfigError as e:
            return refused("unknown-host", str(e), **about)
        try:
            planned = await make_plan(self.fleet, kind, args)
        except ConfigError as e:  # a RUN.toml that is not one, a destination host unknown
            return refused("bad-arguments", str(e), **about)
        except PlanRefused as e:
            return refused(e.code, e.message, **about)
        except HostError as e:
            return refused(e.code, e.message, **about)
        doc = {
            **about,
            "host": planned.host,
            "ok": planned.ok,
            "refused": list(planned.refused),
            "summary": planned.summary,
            "plan": planned.plan,
        }
        if not planned.ok:
            return answer(
                {**doc, "proposal": None, "said": "the checks refused it; nothing recorded"}
            )
        try:
            p = self.store.add(
                kind,
                planned.host,
                args,
                why,
                origin_of(ctx),
                ok=True,
                plan=planned.plan,
                facts=planned.facts,
                summary=planned.summary,
            )
        except ProposalError as e:  # a full disk, too many waiting: the plan passed, unrecorded
            return refused(e.code, e.message, **doc, proposal=None)
        return answer({**doc, "proposal": status_json(p, time.time()), "said": HOW.format(id=p.id)})

    async def propose_purge(
        self, host: str, paths: list[str], reason: str, keep_newest: int = 0, ctx: Any = None
    ) -> str:
        """Plan deleting checkpoint folders on `host` (each path literal; or, with `keep_newest`
        N, one run keeping its newest N checkpoints): every purge check runs on the host, as
        `fleetdeck purge --dry-run --json` answers. Nothing is deleted: when the plan passes, a
        proposal is recorded for a person to confirm by typing each path; its id is answered."""
        args: dict[str, Any] = {"host": host, "paths": list(paths or [])}
        if keep_newest:
            args["keep_newest"] = int(keep_newest)
        return await self._propose("purge", host, args, reason, ctx)

    async def propose_mirror(self, src: str, dst: str, reason: str, ctx: Any = None) -> str:
        """Plan copying folder `src` (HOST:PATH) to `dst` (HOST:PATH), as `fleetdeck mirror
        --dry-run --json` answers. Nothing is copied: when the plan passes, a proposal is
        recorded for a person to confirm; its id is answered."""
        args = {"src": src, "dst": dst}
        return await self._propose("mirror", src.split(":", 1)[0], args, reason, ctx)

    async def propose_launch(
        self,
        host: str,
        run_toml: str,
        reason: str,
        after: str = "",
        ctx: Any = None,
    ) -> str:
        """Plan starting the training run in `run_toml` (a file on this machine) on `host`,
        optionally after the run `after`: the pre-flight `fleetdeck launch` runs
        (base model, corpus, output, GPU memory, disk, live runs). Nothing starts: when every
        check passes, a proposal is recorded for a person to confirm; its id is answered."""
        args: dict[str, Any] = {"host": host, "run_toml": run_toml}
        if after:
            args["after"] = after
        return await self._propose("launch", host, args, reason, ctx)

    async def propose_schedule_removal(
        self, host: str, schedule_id: str, reason: str, ctx: Any = None
    ) -> str:
        """Plan removing one schedule or loop (its id from the `schedules` tool) on `host`: the
        entry is listed afresh and checked on the host as `fleetdeck schedules remove` checks
        it. Nothing is removed or stopped: when the check passes, a proposal is recorded for a
        person to confirm by typing the id; its id is answered."""
        args = {"host": host, "id": schedule_id}
        return await self._propose("remove-schedule", host, args, reason, ctx)

    async def proposal_status(self, proposal_id: str) -> str:
        """What became of one proposal: pending, confirmed, done, failed, refused (with the
        reason code and sentence, e.g. facts-changed), rejected or expired (after 24 hours)."""
        try:
            p = self.store.get(str(proposal_id))
        except ProposalError as e:
            return refused(e.code, e.message, id=shown(str(proposal_id))[:40])
        return answer(status_json(p, time.time()))

    async def proposals(self, limit: int = 50) -> str:
        """Every proposal kept (newest first, at most `limit`, 500), each with its state and
        outcome, and any proposal file that could not be read."""
        found = self.store.load()
        now = time.time()
        n = int(clamp(limit, 1, LIST_MAX))
        return answer(
            {
                "proposals": [status_json(p, now) for p in found[:n]],
                "left_out": max(0, len(found) - n),
                "problems": self.store.problems,
                "expire_after_s": TTL_S,
            }
        )


#: the tools that record a proposal, and those that read them back
PROPOSE_TOOLS = ("propose_purge", "propose_mirror", "propose_launch", "propose_schedule_removal")
READ_TOOLS = ("proposal_status", "proposals")


def register_proposal_tools(
    server: Any, fleet: Fleet, context_cls: type, proposing: Any, read_only: Any
) -> None:
    """Add the plan tools to `server` (an `MCPServer`): the propose tools marked `proposing`,
    the readers `read_only` (the SDK's `ToolAnnotations`); `context_cls` is the SDK's Context,
    through which a propose tool learns the client's name."""
    tools = ProposalTools(fleet)
    for name in PROPOSE_TOOLS + READ_TOOLS:
        fn = getattr(tools, name)
        if "ctx" in fn.__func__.__annotations__:
            # the SDK finds the parameter it fills by its annotation, resolved as a class
            fn.__func__.__annotations__["ctx"] = context_cls
        said = " ".join((fn.__doc__ or "").split())
        marks = proposing if name in PROPOSE_TOOLS else read_only
        server.tool(name=name, description=said, annotations=marks, structured_output=False)(fn)
