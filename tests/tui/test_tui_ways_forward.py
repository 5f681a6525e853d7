"""Pilot tests of the ways forward after a refusal, against real files on local hosts: the
mirror modal offers a replace after `dst-differs` (the destination's path typed back), the
purge modal offers the keep rule for a run without a final adapter (the run and N typed back)."""

from __future__ import annotations

import os
from pathlib import Path

from textual.widgets import Button, Input

from fleetdeck.backend.actions import audit
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal

from support.local_app import HOSTILE, dry_run, local_app, make_run, open_purge, type_into
from support.weights import safetensors


async def test_mirror_modal_replaces_after_the_destination_is_typed_back(tmp_path):
    run, _ = make_run(tmp_path)
    dst = tmp_path / "dst -rf $(x) 'q'" / "adapter"
    dst.mkdir(parents=True)
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
        field = modal.query_one("#replace-confirm", Input)
        assert app.focused is field  # the one thing left to do is typing the destination back
        await type_into(pilot, field, str(dst) + "x")
        assert act.disabled
        await type_into(pilot, field, str(dst))
        assert not act.disabled and str(act.label) == "Replace: copy 2 files, 8.1K (old kept)"
        await pilot.press("enter")  # enter in a field moves to the button, never acts
        await pilot.pause()
        assert app.focused is act and modal.report.result == "refused"
        await pilot.press("enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        rep = modal.report
        assert rep.result == "replaced" and rep.verified, rep.error
        assert f"kept as {rep.kept_as}" in str(modal.query_one("#mirror-result").render())
    assert (dst / "adapter_model.safetensors").read_bytes() == (
        run / "adapter" / "adapter_model.safetensors"
    ).read_bytes()
    assert (Path(rep.kept_as) / "adapter_model.safetensors").read_bytes() == b"something else"
    done = [r for r in audit.read_audit() if r["action"] == "mirror"][-1]
    assert done["result"] == "done" and done["confirmation"] == {
        "via": "dashboard",
        "typed": str(dst),
    }


async def test_purge_modal_offers_the_keep_rule_for_a_run_without_an_adapter(tmp_path):
    run, ck = make_run(tmp_path, HOSTILE + " no adapter")
    for name in os.listdir(run / "adapter"):
        (run / "adapter" / name).unlink()
    (run / "adapter").rmdir()
    for step in (75, 100):
        c = run / "checkpoints" / f"checkpoint-{step}"
        c.mkdir()
        (c / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(1024)))
        (c / "adapter_config.json").write_text("{}")
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        assert modal.plan.paths[0].refused == ["no-keeper"]
        keep = modal.query_one("#keep", Button)
        assert keep.disabled
        await type_into(pilot, modal.query_one("#keep-n", Input), "2")
        assert not keep.disabled and str(keep.label) == "Keep newest 2"
        await pilot.click("#keep")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, PurgeModal) and modal.keep == 2
        assert modal.plan.ok and modal.plan.keep.kept == tuple(
            str(run / "checkpoints" / f"checkpoint-{s}") for s in (75, 100)
        )
        act = modal.query_one("#act", Button)
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(run))
        assert act.disabled  # N is typed back too
        await type_into(pilot, modal.query_one("#keep-confirm", Input), "3")
        assert act.disabled
        await type_into(pilot, modal.query_one("#keep-confirm", Input), "2")
        assert not act.disabled and str(act.label).startswith("Delete 2 checkpoints, keep newest 2")
        await pilot.click("#act")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert modal.report.ok
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "checkpoint-100",
        "checkpoint-75",
    ]
    rec = [r for r in audit.read_audit() if r["action"] == "purge"][-1]
    assert rec["result"] == "done" and rec["keep_newest"]["n"] == 2


async def test_purge_modal_needs_the_best_eval_checkpoint_typed_back(tmp_path):
    """checkpoint-25 holds the run's best eval loss and the final adapter has other weights: the
    plan shows each checkpoint's eval loss with the best marked, refuses `best-eval`, and only
    the best checkpoint's path typed back judges it again with the allowance."""
    import json

    run, ck = make_run(tmp_path, HOSTILE + " best")
    (ck / "trainer_state.json").write_text(
        json.dumps({"log_history": [{"step": 25, "eval_loss": 1.25}]})
    )
    c50 = run / "checkpoints" / "checkpoint-50"
    (c50 / "trainer_state.json").write_text(
        json.dumps(
            {"log_history": [{"step": 25, "eval_loss": 1.25}, {"step": 50, "eval_loss": 1.5}]}
        )
    )
    (c50 / "adapter_config.json").write_text("{}")
    app = local_app(tmp_path)
    async with app.run_test(size=(120, 50)) as pilot:
        modal = await open_purge(app, pilot, [ck])
        assert modal.plan.paths[0].refused == ["best-eval"]
        evals = str(modal.query_one("#purge-evals").render())
        assert (
            "checkpoint-25  step 25  1.2500  ← best" in evals
            and "checkpoint-50  step 50  1.5000" in evals
        )
        act = modal.query_one("#act", Button)
        await type_into(pilot, modal.query_one("#confirm-0", Input), str(ck))
        assert act.disabled
        await type_into(pilot, modal.query_one("#allow-best", Input), str(ck) + " ")
        assert modal.plan.paths[0].refused == ["best-eval"]  # near is not the path
        await type_into(pilot, modal.query_one("#allow-best", Input), str(ck))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert modal.plan.ok and modal.plan.allow_best == (str(ck),)
        assert not act.disabled
        await pilot.click("#act")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert modal.report.ok
        assert "re-verified by sha256" in str(modal.query_one("#purge-result").render())
    assert not ck.exists() and c50.exists()
    rec = [r for r in audit.read_audit() if r["action"] == "purge"][-1]
    assert rec["result"] == "done" and rec["allow_best"] == [str(ck)]
