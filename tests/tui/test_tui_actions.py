"""Pilot tests of the action modals against real files and processes on the local host."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from textual.widgets import Button, DataTable, Input, Select

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal
from fleetdeck.tui.sources import RecordedSource

from support.local_app import HOSTILE, dry_run, local_app, make_run, open_purge, type_into
from support.weights import safetensors


async def test_purge_focus_in_the_path_field_and_cancel_deletes_nothing(tmp_path):
    _, ck = make_run(tmp_path)
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        assert app.focused.id == "confirm-0"  # the field the operator must fill
        assert modal.plan is not None and modal.plan.ok, modal.plan
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(ck))
        assert not modal.query_one("#act", Button).disabled
        modal.query_one("#cancel", Button).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, PurgeModal)
    assert ck.is_dir()
    assert not (Path.cwd() / "pwned").exists()


async def test_purge_wrong_typed_path_deletes_nothing(tmp_path):
    _, ck = make_run(tmp_path)
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        inp = modal.query_one("#confirm-0", Input)
        for wrong in (str(ck) + " ", str(ck)[:-1], str(ck).upper(), str(ck) + "/"):
            await type_into(pilot, inp, wrong)
            assert modal.query_one("#act", Button).disabled, wrong
            await pilot.press("enter")  # submitting the field must not delete either
            await app.workers.wait_for_complete()
            await pilot.pause()
        await pilot.click("#act")
        await app.workers.wait_for_complete()
        assert modal.report is None
    assert ck.is_dir() and len(list(ck.iterdir())) == 2


async def test_purge_refused_check_keeps_confirm_disabled(tmp_path):
    run, ck = make_run(tmp_path)
    link = run / "checkpoints" / "checkpoint-99"
    link.symlink_to(ck)
    outside = tmp_path / "elsewhere" / "checkpoint-1"
    outside.mkdir(parents=True)
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        for bad, code in ((link, "symlink"), (outside, "outside-roots")):
            modal = await open_purge(app, pilot, [bad])
            assert modal.plan is not None and not modal.plan.ok
            await type_into(pilot, modal.query_one("#confirm-0", Input), str(bad))
            assert modal.query_one("#act", Button).disabled
            table = modal.query_one("#purge-plan", DataTable)
            checks = table.get_row_at(0)[2].plain
            assert f"✖ {code}" in checks
            assert "refused" in str(modal.query_one("#purge-verdict").render())
            await pilot.press("escape")
            await pilot.pause()
    assert ck.is_dir() and outside.is_dir() and link.is_symlink()


async def test_purge_exact_paths_delete_and_verify_keepers(tmp_path):
    run, ck = make_run(tmp_path)
    ck50 = run / "checkpoints" / "checkpoint-50"
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        modal = await open_purge(app, pilot, [ck, ck50])
        assert modal.query_one("#act", Button).disabled
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(ck))
        assert modal.query_one("#act", Button).disabled  # one of two typed
        await type_into(pilot, modal.query_one("#confirm-1", Input), str(ck50))
        assert not modal.query_one("#act", Button).disabled
        await pilot.click("#act")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        result = str(modal.query_one("#purge-result").render())
        assert "deleted and verified" in result and "re-verified ✔" in result
        assert "before →" in result
        assert modal.report.ok
        act = modal.query_one("#act", Button)  # it no longer offers what it did
        assert act.disabled and str(act.label) == "Done"
    assert not ck.exists() and not ck50.exists()
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    assert any(
        r["action"].startswith("purge") and r["result"] == "done" for r in audit.read_audit()
    )


async def test_mirror_copies_with_progress_and_shows_verification(tmp_path):
    run, _ = make_run(tmp_path)
    dst = tmp_path / "mirror dst" / "adapter"
    app = local_app(tmp_path, names=("a", "b"))
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(MirrorModal("a", str(run / "adapter")))
        await pilot.pause()
        modal = app.screen
        assert modal.query_one("#mirror-host", Select).value == "b"
        modal.query_one("#mirror-path", Input).value = str(dst)
        seen = []
        shown = modal.on_progress
        modal.on_progress = lambda done, total: (seen.append((done, total)), shown(done, total))
        act = modal.query_one("#act", Button)
        assert act.disabled and str(act.label) == "Copy (dry run first)"
        await dry_run(app, pilot, modal)
        assert not dst.exists() and not seen  # the dry run wrote nothing
        assert str(act.label) == "Copy 2 files, 8.1K" and not act.disabled
        assert app.focused is act  # enter moved to the button that says what it will do
        modal.query_one("#mirror-path", Input).focus()
        await pilot.pause()
        await pilot.press("enter")  # enter in the field again still does not copy
        await pilot.pause()
        assert app.focused is act and not dst.exists()
        await pilot.press("enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert (
            seen and seen[-1][0] == seen[-1][1] == len(safetensors(bytes(8192))) + 2
        )  # bytes, total
        table = modal.query_one("#mirror-files", DataTable)
        statuses = {
            table.get_row_at(i)[1].plain: table.get_row_at(i)[0].plain
            for i in range(table.row_count)
        }
        assert statuses == {"adapter_model.safetensors": "copied", "adapter_config.json": "copied"}
        assert "verified" in str(modal.query_one("#mirror-result").render())
        assert "100%" in str(modal.query_one("#mirror-rate").render())
        assert modal.report.verified
    assert (dst / "adapter_model.safetensors").read_bytes() == (
        run / "adapter" / "adapter_model.safetensors"
    ).read_bytes()


async def test_mirror_destination_follows_the_chosen_hosts_runs_root(tmp_path):
    run, _ = make_run(tmp_path)
    toml = "".join(
        f'[hosts.{n}]\nlocal = true\nruns = ["{tmp_path}/{n}-runs"]\n' for n in ("b", "c")
    )
    toml += f'[hosts.a]\nlocal = true\nruns = ["{tmp_path}/runs"]\n'
    fleet = parse_fleet(toml, "test")
    app = FleetdeckApp(
        fleet, RecordedSource([FleetSnapshot(hosts=())]), autopoll=False, clock=lambda: 1.0
    )
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(MirrorModal("a", str(run / "adapter")))
        await pilot.pause()
        modal = app.screen
        assert app.focused is modal.query_one("#mirror-host")  # the field to fill first
        await pilot.click("#dry")  # no host picked yet: a warning, no copy
        await pilot.pause()
        assert modal.report is None and modal.query_one("#act", Button).disabled
        modal.query_one("#mirror-host", Select).value = "c"
        await pilot.pause()
        assert (
            modal.query_one("#mirror-path", Input).value == f"{tmp_path}/c-runs/{HOSTILE}/adapter"
        )


async def test_mirror_refuses_a_differing_destination(tmp_path):
    run, _ = make_run(tmp_path)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "adapter_model.safetensors").write_bytes(b"something else")
    app = local_app(tmp_path, names=("a", "b"))
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(MirrorModal("a", str(run / "adapter")))
        await pilot.pause()
        modal = app.screen
        modal.query_one("#mirror-path", Input).value = str(dst)
        await dry_run(app, pilot, modal)
        act = modal.query_one("#act", Button)
        assert act.disabled and str(act.label) == "Copy refused"
        said = str(modal.query_one("#mirror-result").render())
        assert "dst-differs" in said
        # what to do here, not only a command-line flag
        assert "type its path in the dashboard's field" in " ".join(said.split()), said
    assert (dst / "adapter_model.safetensors").read_bytes() == b"something else"


@pytest.fixture
def loop_process():
    proc = subprocess.Popen(["bash", "-c", "while true; do sleep 1; done"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


async def test_remove_loop_needs_the_id_typed_back(tmp_path, loop_process):
    (tmp_path / "runs").mkdir()
    toml = f'[hosts.local]\nlocal = true\nruns = ["{tmp_path}/runs"]\n'
    app = FleetdeckApp(parse_fleet(toml, "test"), autopoll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        sched = None
        for _ in range(3):  # the probe sees the loop once bash has started its sleep child
            app.poll_fleet()
            await app.workers.wait_for_complete()
            await pilot.pause()
            sched = next((s for s in app.state.schedules if s.pid == loop_process.pid), None)
            if sched:
                break
            time.sleep(0.5)
        assert sched is not None and sched.kind == "loop" and sched.stray
        await pilot.press("3")
        table = app.screen.query_one("#sched-table")
        table.move_cursor(row=table.get_row_index(f"local/{sched.id}"))
        await pilot.press("x")
        await pilot.pause()
        await app.workers.wait_for_complete()
        modal = app.screen
        assert isinstance(modal, RemoveScheduleModal) and app.focused.id == "remove-confirm"
        inp = modal.query_one("#remove-confirm", Input)
        inp.value = sched.id[:-1]
        await pilot.pause()
        assert modal.query_one("#act", Button).disabled
        await pilot.press("escape")
        await pilot.pause()
        assert loop_process.poll() is None  # cancel left it running
        await pilot.press("x")
        await pilot.pause()
        await app.workers.wait_for_complete()
        modal = app.screen
        modal.query_one("#remove-confirm", Input).value = sched.id
        await pilot.pause()
        assert not modal.query_one("#act", Button).disabled
        await pilot.click("#act")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert modal.report is not None and modal.report.ok, modal.report
        assert "removed" in str(modal.query_one("#remove-result").render())
    loop_process.wait(timeout=10)


async def test_launch_needs_a_passing_preflight_of_the_same_inputs(tmp_path):
    import json

    (tmp_path / "runs").mkdir()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": f"doc {i} the quick brown fox"}) + "\n" for i in range(20))
    )
    good = tmp_path / "good.toml"
    good.write_text(
        f'name = "t"\nbase_model = "random:tiny"\ncorpus = "{corpus}"\n'
        f'output = "{tmp_path}/runs/t1"\nseq_len = 16\nmax_steps = 2\n'
    )
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace(str(corpus), str(tmp_path / "missing.jsonl")))
    from fleetdeck.tui.modals.launch import LaunchModal

    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(LaunchModal("local"))
        await pilot.pause()
        modal = app.screen
        launch = modal.query_one("#act", Button)
        toml = modal.query_one("#launch-toml", Input)
        assert app.focused is toml and launch.disabled
        toml.value = str(bad)
        await pilot.press("enter")  # enter runs the pre-flight
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "refused (corpus)" in str(modal.query_one("#launch-verdict").render())
        assert launch.disabled
        toml.value = str(good)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "every pre-flight check passed" in str(modal.query_one("#launch-verdict").render())
        assert not launch.disabled
        modal.query_one("#launch-after", Input).value = f"{tmp_path}/runs/other"
        await pilot.pause()
        assert launch.disabled  # the inputs changed since the pre-flight: check again first
        await pilot.press("escape")
        await pilot.pause()
    assert not (tmp_path / "runs" / "t1").exists()  # nothing was started


async def test_polls_are_applied_while_a_mirror_copies(tmp_path):
    src = tmp_path / "runs" / "big" / "adapter"
    src.mkdir(parents=True)
    (src / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(96 << 20)))
    app = local_app(tmp_path, names=("a", "b"))
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(MirrorModal("a", str(src)))
        await pilot.pause()
        modal = app.screen
        modal.query_one("#mirror-path", Input).value = str(tmp_path / "copy")
        progressed = []
        shown = modal.on_progress
        modal.on_progress = lambda done, total: (progressed.append(done), shown(done, total))
        await dry_run(app, pilot, modal)
        await pilot.click("#act")

        def copying():  # the report so far is the dry run's
            return modal.report is None or modal.report.dry_run

        polls_during_copy = 0
        for _ in range(200):
            await pilot.pause(0.05)
            if progressed and copying():
                before = app.state.polls
                app.poll_fleet()
                await pilot.pause(0.05)
                if app.state.polls > before and copying():
                    polls_during_copy += 1
            if not copying():
                break
        await app.workers.wait_for_complete()
        assert modal.report is not None and modal.report.verified
        assert polls_during_copy >= 1


async def test_purge_whose_audit_record_fails_is_shown_as_a_failure(tmp_path, monkeypatch):
    """The paths are deleted and the keepers verify, but the result record cannot be written:
    the modal and the notification say so in red, never "deleted and verified"."""
    import errno

    run, ck = make_run(tmp_path)
    real = audit.audit

    def failing(action, host, result, **fields):
        if result != "started":
            raise audit.AuditError(
                audit.audit_path(), OSError(errno.ENOSPC, "No space left on device")
            )
        return real(action, host, result, **fields)

    monkeypatch.setattr(audit, "audit", failing)
    app = local_app(tmp_path)
    notes = []
    async with app.run_test(size=(120, 40)) as pilot:
        monkeypatch.setattr(app, "notify", lambda msg, **kw: notes.append((msg, kw)))
        modal = await open_purge(app, pilot, [ck])
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(ck))
        await pilot.click("#act")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        rep = modal.report
        assert rep.deleted and rep.verified and rep.audit_error
        result = modal.query_one("#purge-result").render()
        assert "deleted and verified" not in result.plain
        first = result.plain.splitlines()[0]
        assert (
            first.startswith("✖ deleted, but the audit log was NOT written")
            and "disk is full" in first
        )
        from fleetdeck.tui.modals.purge_text import report_text

        assert report_text(rep).get_style_at_offset(app.console, 0).color.name == "red"
        msg, kw = next((m, k) for m, k in notes if k.get("title") == "Purge")
        assert "NOT audited" in msg and kw["severity"] == "warning"
    assert not ck.exists()
