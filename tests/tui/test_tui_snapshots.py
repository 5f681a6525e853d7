"""Snapshot tests (pytest-textual-snapshot) of every view and modal, from recorded fleets.

Snapshots reach the screens through the same `FleetPolled` path as live polls; the clock is
fixed and cursors do not blink. Update with `pytest tests/tui/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from textual.widgets import Input

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.launch.result import Check, Preflight
from fleetdeck.backend.actions.mirror.common import MirrorFile
from fleetdeck.backend.actions.mirror.report import MirrorReport
from fleetdeck.backend.actions.schedules import RemovalCheck
from fleetdeck.backend.fleet.models import Process
from fleetdeck.tui.modals.dialogs import ErrorModal
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal
from fleetdeck.tui.modals.stop import StopProcessModal

from support.history import _night
from support.modals import RUN, purge_plan
from support.recorded import T, feed, fixture_app


def no_blink(app):
    for inp in app.screen.query(Input):
        inp.cursor_blink = False


def fed(then=None):
    """run_before: two recorded polls, then `then(app)`."""

    async def run_before(pilot):
        app = pilot.app
        await feed(app, pilot)
        if then is not None:
            then(app)
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            no_blink(app)

    return run_before


@pytest.mark.parametrize("size", [(100, 30), (200, 60)])
def test_fleet_view(snap_compare, size):
    assert snap_compare(fixture_app(), terminal_size=size, run_before=fed())


def test_fleet_view_light_theme(snap_compare):
    def light(app):
        app.theme = "textual-light"

    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(light))


def test_host_view(snap_compare):
    assert snap_compare(
        fixture_app(), terminal_size=(100, 30), run_before=fed(), press=["j", "enter"]
    )


def test_runs_view(snap_compare):
    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(), press=["2"])


def test_runs_view_wide(snap_compare):
    assert snap_compare(fixture_app(), terminal_size=(200, 60), run_before=fed(), press=["2"])


def test_schedules_view(snap_compare):
    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(), press=["3"])


def test_audit_view(snap_compare):
    rec = {
        "time": "2025-11-29T12:00:00+0000",
        "ts": 1764417600.0,
        "user": "ops",
        "controller": "desk",
        "host": "gx10",
        "action": "purge",
        "result": "done",
        "paths": [f"{RUN}/checkpoints/checkpoint-25"],
        "free_bytes_before": 100,
        "free_bytes_after": 200,
    }
    lines = [
        rec,
        {
            **rec,
            "time": "2025-11-29T12:05:00+0000",
            "action": "mirror",
            "result": "verified",
            "host": "ana-ml2",
            "paths": None,
            "src": "gx10:/home/ops/runs/run-6/adapter",
        },
    ]
    audit.audit_path().write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(), press=["4"])


def test_help_screen(snap_compare):
    assert snap_compare(
        fixture_app(), terminal_size=(100, 30), run_before=fed(), press=["question_mark"]
    )


@pytest.mark.parametrize("refused", [False, True])
def test_purge_modal(snap_compare, refused):
    plan = purge_plan(refused)
    paths = [p.path for p in plan.paths]

    def open_modal(app):
        app.push_screen(PurgeModal("gx10", paths, plan=plan))

    assert snap_compare(fixture_app(), terminal_size=(120, 40), run_before=fed(open_modal))


def test_mirror_modal_verified(snap_compare):
    files = (
        MirrorFile("adapter_model.safetensors", 167772160, "ab" * 32, "ab" * 32, "copied"),
        MirrorFile("adapter_config.json", 812, "cd" * 32, "cd" * 32, "copied"),
    )
    rep = MirrorReport(
        src="gx10:/home/ops/runs/run-6/adapter",
        dst="ana-ml2:/home/ops/runs/run-6/adapter",
        dry_run=False,
        verified=True,
        bytes_src=167772972,
        bytes_dst=167772972,
        files=files,
        result="copied",
        seconds=2.5,
        bytes_copied=167772972,
        rate=67109188.8,
    )

    def open_modal(app):
        modal = MirrorModal("gx10", "/home/ops/runs/run-6/adapter")
        app.push_screen(modal)
        app.call_after_refresh(lambda: modal.show_report(rep, "ana-ml2", False))

    assert snap_compare(fixture_app(), terminal_size=(120, 40), run_before=fed(open_modal))


def test_remove_schedule_modal(snap_compare):
    def open_modal(app):
        s = app.state.schedule("ana-ml2", "loop-9c1e55aa")
        check = RemovalCheck(
            host="ana-ml2",
            schedule_id=s.id,
            kind=s.kind,
            ok=True,
            reason_code=None,
            message="loop pid 5120 still running with the same start time",
        )
        app.push_screen(RemoveScheduleModal(s, check=check))

    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(open_modal))


def test_launch_modal_preflight(snap_compare):
    pre = Preflight(
        host="gx10",
        run_path="/home/ops/runs/run-8",
        after=f"{RUN}",
        checks=(
            Check("run-toml", True, "RUN.toml parsed: 17 keys"),
            Check("output-free", True, "/home/ops/runs/run-8 does not exist yet"),
            Check("gpu-memory", False, "needs ~21.4 GiB, GPU 0 has 9.3 GiB free"),
        ),
        estimate={"params": "0.6B", "memory_gib": 21.4},
    )

    def open_modal(app):
        modal = LaunchModal("gx10", "runs/run-8.toml", RUN)
        app.push_screen(modal)
        app.call_after_refresh(lambda: modal.show_checks(pre))

    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(open_modal))


def test_error_modal(snap_compare):
    def open_modal(app):
        app.push_screen(
            ErrorModal("mirror", "Traceback (most recent call last):\n  ...\nKeyError: 'boom'")
        )

    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(open_modal))


def test_history_view(snap_compare, monkeypatch):
    """Six recorded hours of gx10 as the History view (`6`) draws them: the night is written and
    read at the recorded clock, so the sparklines do not move with the day the test runs."""
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: T)
        _night(T)
    monkeypatch.setattr("fleetdeck.tui.views.history.time", SimpleNamespace(time=lambda: T))
    assert snap_compare(fixture_app(), terminal_size=(140, 40), run_before=fed(), press=["6"])


def test_stop_modal(snap_compare):
    proc = Process(
        pid=41233,
        start=1234567,
        user="ops",
        command="python -m fleetdeck.backend.train runs/run-7.toml",
        cpu_pct=98.0,
        rss_bytes=6 * 1024**3,
        gpu_mib=21_504.0,
        why=("gpu", "trainer"),
    )

    def open_modal(app):
        app.push_screen(StopProcessModal("gx10", proc))

    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=fed(open_modal))


def test_filter_prompt(snap_compare):
    """The Runs view narrowed by `/` as the operator types, the prompt still open."""

    async def run_before(pilot):
        await fed()(pilot)
        await pilot.press("2", "slash", *"run-7")
        await pilot.pause()
        no_blink(pilot.app)

    assert snap_compare(fixture_app(), terminal_size=(100, 30), run_before=run_before)
