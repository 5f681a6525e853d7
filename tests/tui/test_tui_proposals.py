"""The Proposals view by keys: 7 lists who proposed what and why; c judges the highlighted
proposal again on the host and opens the purge pop-up filled in from it, where the path is
typed back as for any purge; a proposal whose facts moved is refused without a pop-up; x
rejects. A schedule's removal opens the same way and asks for its id, typed back. Every outcome
is audited with the proposal's origin, and the action's own records name the proposal they
carry out (`for_proposal`), while a later ordinary action's do not."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from textual.widgets import Button, Input, Select

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.proposal_plans import make_plan, rejudge
from fleetdeck.backend.actions.proposals import ProposalError, ProposalStore
from fleetdeck.cli.mcp_propose import ProposalTools
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal
from fleetdeck.tui.views.proposals import ProposalsScreen, proposal_rows
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.crontab import install_crontab, read_crontab
from support.local_app import local_app, make_run, type_into

ORIGIN = {"via": "mcp", "client": "test-agent", "client_version": "1"}


async def _propose(app, path: str, reason: str):
    args = {"host": "local", "paths": [path]}
    planned = await make_plan(app.fleet, "purge", args)
    assert planned.ok, planned.refused
    return ProposalStore().add(
        "purge",
        "local",
        args,
        reason,
        ORIGIN,
        ok=True,
        plan=planned.plan,
        facts=planned.facts,
        summary=planned.summary,
    )


async def _settle(app, pilot):
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_rows_say_who_proposed_what_and_why(tmp_path):
    _, ck = make_run(tmp_path, "run-1")
    app = local_app(tmp_path)
    p = await _propose(app, str(ck), "disk \x1b[2J nearly full")
    (row,) = proposal_rows([p], p.created).values()
    assert row[0] == p.id and row[1].plain == "pending" and row[2] == "purge"
    assert row[4] == "mcp (test-agent)" and row[5] == "disk \\x1b[2J nearly full"


async def test_a_proposal_confirmed_by_keys_is_carried_out_and_audited(tmp_path):
    _, ck = make_run(tmp_path, "run-1")
    app = local_app(tmp_path)
    p = await _propose(app, str(ck), "free the disk")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        await _settle(app, pilot)
        assert isinstance(app.screen, ProposalsScreen)
        table = app.screen.query_one("#proposals-table", KeyedTable)
        assert table.current_key == p.id
        await pilot.press("c")
        await _settle(app, pilot)
        modal = app.screen
        assert isinstance(modal, PurgeModal) and modal.paths == [str(ck)]
        assert modal.plan is not None and modal.plan.ok
        act = modal.query_one("#act", Button)
        assert act.disabled  # nothing happens before the path is typed back
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(ck))
        assert not act.disabled
        act.focus()
        await pilot.press("enter")
        await _settle(app, pilot)
        assert modal.report is not None and modal.report.ok
        await pilot.press("escape")
        await _settle(app, pilot)
        assert isinstance(app.screen, ProposalsScreen)
    assert not ck.exists()
    done = ProposalStore().get(p.id)
    assert done.state == "done" and done.outcome["via"] == "dashboard"
    recs = [r for r in audit.read_audit() if r.get("proposal") == p.id]
    assert [r["result"] for r in recs] == ["proposed", "confirmed", "done"]
    assert all(r["origin"] == ORIGIN for r in recs)
    purges = [r for r in audit.read_audit() if r["action"] == "purge"]
    assert [r["result"] for r in purges] == ["started", "done"]
    assert all(r["for_proposal"] == {"id": p.id, "origin": ORIGIN} for r in purges)


async def test_an_ordinary_purge_after_a_proposal_names_no_proposal(tmp_path):
    """A proposal carried out, then a purge from the Runs view in the same dashboard: the
    proposal's name stays with its own action and does not leak into the next one."""
    run, ck = make_run(tmp_path, "run-1")
    app = FleetdeckApp(local_app(tmp_path).fleet, autopoll=False)
    p = await _propose(app, str(ck), "free the disk")
    later = run / "checkpoints" / "checkpoint-50"
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        await _settle(app, pilot)
        await pilot.press("c")
        await _settle(app, pilot)
        await type_into(pilot, app.screen.query_one("#confirm-0", Input), str(ck))
        app.screen.query_one("#act", Button).focus()
        await pilot.press("enter")
        await _settle(app, pilot)
        await pilot.press("escape")
        await _settle(app, pilot)
        assert ProposalStore().get(p.id).state == "done"
        app.poll_fleet()
        await _settle(app, pilot)
        await pilot.press("2")
        await _settle(app, pilot)
        runs = app.screen.query_one("#runs-table", KeyedTable)
        runs.move_cursor(row=runs.get_row_index(runs.keys[0]))
        await pilot.press("enter")
        await _settle(app, pilot)
        ckpts = app.screen.query_one("#ckpt-table", KeyedTable)
        ckpts.move_cursor(row=ckpts.get_row_index(str(later)))
        await pilot.press("p")
        await _settle(app, pilot)
        modal = app.screen
        assert isinstance(modal, PurgeModal) and modal.paths == [str(later)]
        assert modal.for_proposal is None
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(later))
        modal.query_one("#act", Button).focus()
        await pilot.press("enter")
        await _settle(app, pilot)
        assert modal.report is not None and modal.report.ok
    assert not later.exists()
    purges = [r for r in audit.read_audit() if r["action"] == "purge"]
    assert [r["result"] for r in purges] == ["started", "done", "started", "done"]
    assert [r.get("for_proposal", {}).get("id") for r in purges] == [p.id, p.id, None, None]


async def test_moved_facts_refuse_without_a_popup_and_x_rejects(tmp_path):
    run, ck = make_run(tmp_path, "run-1")
    app = local_app(tmp_path)
    moved = await _propose(app, str(ck), "first")
    other = await _propose(app, str(run / "checkpoints" / "checkpoint-50"), "second")
    # a file under the first proposal's path grew after it was proposed
    with open(ck / "adapter_config.json", "a") as f:
        f.write(" ")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        await _settle(app, pilot)
        table = app.screen.query_one("#proposals-table", KeyedTable)
        # newest first: the second proposal, then the first
        assert table.keys[:2] == [other.id, moved.id]
        await pilot.press("down")
        assert table.current_key == moved.id
        await pilot.press("c")
        await _settle(app, pilot)
        assert isinstance(app.screen, ProposalsScreen)  # no pop-up
        await pilot.press("up", "x")
        await _settle(app, pilot)
    assert ck.is_dir() and (run / "checkpoints" / "checkpoint-50").is_dir()
    got = ProposalStore().get(moved.id)
    assert got.state == "refused" and got.outcome["code"] == "facts-changed"
    assert ProposalStore().get(other.id).state == "rejected"
    assert not [r for r in audit.read_audit() if r["action"] == "purge"]


async def test_a_mirror_proposal_opens_its_popup_filled_in_claimed_until_closed(tmp_path):
    run, _ = make_run(tmp_path, "run-1")
    app = local_app(tmp_path, names=("local", "spare"))
    dst = tmp_path / "copies" / "adapter"
    doc = json.loads(
        await ProposalTools(app.fleet).propose_mirror(
            f"local:{run / 'adapter'}", f"spare:{dst}", "a second copy"
        )
    )
    assert doc["ok"], doc.get("refused") or doc.get("error")
    pid = doc["proposal"]["id"]
    first = ProposalStore().get(pid)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        await _settle(app, pilot)
        await pilot.press("c")
        await _settle(app, pilot)
        modal = app.screen
        assert isinstance(modal, MirrorModal)
        assert modal.query_one("#mirror-host", Select).value == "spare"
        assert modal.query_one("#mirror-path", Input).value == str(dst)
        # claimed while its pop-up is open: a second person (or the CLI) cannot carry it out
        seen = ProposalStore().get(pid)
        assert seen.state == "confirmed"
        assert (await rejudge(app.fleet, seen, time.time())).code == "settled"
        with pytest.raises(ProposalError):
            ProposalStore().settle(first, "confirmed", "someone else")
        await pilot.press("escape")
        await _settle(app, pilot)
    assert not dst.exists()
    back = ProposalStore().get(pid)  # closed unused: released, it waits again
    assert back.state == "pending" and back.outcome["code"] == "released"
    recs = [r for r in audit.read_audit() if r.get("proposal") == pid]
    assert [r["result"] for r in recs] == ["proposed", "confirmed", "pending"]
    assert (await rejudge(app.fleet, back, time.time())).ok  # and can be opened again


@pytest.mark.skipif(shutil.which("crontab") is None, reason="cron's crontab is not installed")
@pytest.mark.root
async def test_a_schedule_removal_proposal_removes_the_crontab_line_once_its_id_is_typed(
    root_crontab, tmp_path
):
    token = f"fdprop{os.getpid()}x"
    keep = "*/5 * * * * /usr/bin/true keep-1\n"
    install_crontab(f"{keep}37 * * * * /usr/bin/true {token}\n", tmp_path)
    (tmp_path / "runs").mkdir()
    app = FleetdeckApp(local_app(tmp_path).fleet, autopoll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_fleet()
        await _settle(app, pilot)
        (sched,) = [s for s in app.state.schedules if token in s.command]
        doc = json.loads(
            await ProposalTools(app.fleet).propose_schedule_removal(
                host="local", schedule_id=sched.id, reason="a stray check"
            )
        )
        assert doc["ok"], doc.get("refused") or doc.get("error")
        pid = doc["proposal"]["id"]
        assert token.encode() in read_crontab()  # proposing removed nothing
        await pilot.press("7")
        await _settle(app, pilot)
        assert app.screen.query_one("#proposals-table", KeyedTable).current_key == pid
        await pilot.press("c")
        await _settle(app, pilot)
        modal = app.screen
        assert isinstance(modal, RemoveScheduleModal) and modal.schedule.id == sched.id
        assert app.focused is modal.query_one("#remove-confirm", Input)
        act = modal.query_one("#act", Button)
        assert act.disabled  # nothing happens before the id is typed back
        await type_into(pilot, modal.query_one("#remove-confirm", Input), sched.id[:-1])
        assert act.disabled and token.encode() in read_crontab()
        await type_into(pilot, modal.query_one("#remove-confirm", Input), sched.id)
        assert not act.disabled
        act.focus()
        await pilot.press("enter")
        await _settle(app, pilot)
        assert modal.report is not None and modal.report.ok, modal.report
        await pilot.press("escape")
        await _settle(app, pilot)
        assert isinstance(app.screen, ProposalsScreen)
    assert read_crontab() == keep.encode()
    done = ProposalStore().get(pid)
    assert done.state == "done" and done.outcome["via"] == "dashboard"
    recs = [r for r in audit.read_audit() if r.get("proposal") == pid]
    assert [r["result"] for r in recs] == ["proposed", "confirmed", "done"]
    assert done.origin["via"] == "mcp" and all(r["origin"] == done.origin for r in recs)
    removals = [r for r in audit.read_audit() if r["action"] == "schedule-remove"]
    assert [r["result"] for r in removals] == ["started", "done"]
    assert all(r["for_proposal"] == {"id": pid, "origin": done.origin} for r in removals)


async def test_quitting_with_a_proposals_popup_open_releases_it(tmp_path):
    _, ck = make_run(tmp_path, "run-1")
    app = local_app(tmp_path)
    p = await _propose(app, str(ck), "free the disk")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        await _settle(app, pilot)
        await pilot.press("c")
        await _settle(app, pilot)
        assert isinstance(app.screen, PurgeModal)
        assert ProposalStore().get(p.id).state == "confirmed"
        app.exit()
        await pilot.pause()
    got = ProposalStore().get(p.id)
    assert got.state == "pending" and got.outcome["code"] == "released"
    assert ck.is_dir()
