"""What a key press or a view switch redoes, counted (never timed; the figures are in
benchmarks/tui_big.py): the footer is not composed again for the keys it already shows, a
detail line of the same shape is redrawn without laying the screen out again, and the cursor
passing over runs reads one train.log, the one it rests on."""

from __future__ import annotations

import os

from textual.widgets._footer import FooterKey

from fleetdeck.backend.fleet import logs as fleet_logs
from fleetdeck.backend.fleet.config import parse_fleet
from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot, Run
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.messages import FleetPolled
from fleetdeck.tui.sources import RecordedSource
from fleetdeck.tui.views import run_log


def footer_keys(app: FleetdeckApp) -> list[FooterKey]:
    return list(app.screen.query(FooterKey))


def run_fleet(tmp_path, n: int = 6) -> tuple[FleetdeckApp, list[Run]]:
    root = tmp_path / "runs"
    runs = []
    for k in range(n):
        d = root / f"run-{k}"
        d.mkdir(parents=True)
        (d / "train.log").write_text(f"log of run {k}\n")
        runs.append(
            Run(host="local", path=str(d), name=f"run-{k}", state="finished", step=10, max_steps=10)
        )
    fleet = parse_fleet(f'[hosts.local]\nlocal = true\nruns = ["{root}"]\n', "x")
    snap = FleetSnapshot(
        hosts=(HostSnapshot(name="local", reachable=True, time=1.0, runs=tuple(runs)),), time=1.0
    )
    return FleetdeckApp(fleet, RecordedSource([snap]), autopoll=False, clock=lambda: 1.0), runs


async def test_a_view_switch_keeps_the_footer_it_already_shows(tmp_path):
    app, _ = run_fleet(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        app.post_message(FleetPolled(app.source.snapshots[0]))
        await pilot.pause()
        fleet_keys = footer_keys(app)
        assert {k.key for k in fleet_keys} >= {"2", "3", "q"} and "1" not in {
            k.key for k in fleet_keys
        }
        for view in "321":
            await pilot.press(view)
            await pilot.pause()
        # the Fleet view's keys are the very widgets it showed before: not composed again
        assert footer_keys(app) == fleet_keys
        # and a footer whose keys do change is composed again: the checkpoints table has its own
        await pilot.press("2")
        await pilot.pause()
        assert "space" not in {k.key for k in footer_keys(app)}
        await pilot.press("enter")  # the focus moves to the run's checkpoints
        await pilot.pause()
        assert "space" in {k.key for k in footer_keys(app)}
        await pilot.press("shift+tab")
        await pilot.pause()
        assert "space" not in {k.key for k in footer_keys(app)}


async def test_the_cursor_reads_the_log_of_the_run_it_rests_on_only(tmp_path, monkeypatch):
    app, runs = run_fleet(tmp_path)
    reads: list[str] = []
    real = fleet_logs.log_lines

    def counted(link, path, *a, **k):
        reads.append(os.path.basename(path))
        return real(link, path, *a, **k)

    monkeypatch.setattr(fleet_logs, "log_lines", counted)
    async with app.run_test(size=(120, 30)) as pilot:
        app.post_message(FleetPolled(app.source.snapshots[0]))
        await pilot.pause()
        await pilot.press("2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        first = app.screen.selected.name
        assert reads == [first]
        assert f"log of {first.replace('-', ' ')}" in "\n".join(
            app.screen.query_one("#run-log").lines
        )
        for _ in range(4):
            await pilot.press("j")
        rest = app.screen.selected.name
        assert rest != first
        # on its way the pane says the log is coming, never the last run's lines under a new title
        assert "reading train.log" in "\n".join(app.screen.query_one("#run-log").lines)
        await pilot.pause(run_log.LOG_REST_S * 4)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert reads == [first, rest], "the rows passed over are not read"
        assert f"log of {rest.replace('-', ' ')}" in "\n".join(
            app.screen.query_one("#run-log").lines
        )


async def test_a_detail_line_of_the_same_shape_does_not_lay_the_screen_out(tmp_path):
    app, _ = run_fleet(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        app.post_message(FleetPolled(app.source.snapshots[0]))
        await pilot.pause()
        await pilot.press("2", "j")  # the first title is drawn before the pane has a width
        await pilot.pause()
        title = app.screen.query_one("#run-title")
        layouts: list[bool] = []
        real = title.refresh

        def spy(*a, layout: bool = False, **k):
            layouts.append(layout)
            return real(*a, layout=layout, **k)

        title.refresh = spy
        await pilot.press("j")
        await pilot.pause()
        await pilot.press("j")
        await pilot.pause()
        assert layouts and not any(layouts), layouts  # one line before and after: no layout
        assert "run-3" in str(title.render())
        # a title that gains a line is laid out again
        app.screen.selected.__dict__["reason"] = "stopped by hand"
        app.screen.selected.__dict__["state"] = "failed"
        app.screen.show_run()
        assert layouts[-1] is True


def shown_footer(screen) -> list:
    return sorted((k.key, k.disabled) for k in screen.query(FooterKey))


def wanted_footer(screen) -> list:
    return sorted((b.key, not on) for (_, b, on, _t) in screen.active_bindings.values() if b.show)


async def test_a_footer_change_announced_just_before_a_switch_is_not_lost(tmp_path):
    """A view's footer is composed after a refresh, from the bindings as they are then: when a
    view key is handled between the announcement and the recompose, the footer must still come
    right once the view is back on screen."""
    from fleetdeck.tui.widgets.key_footer import KeyFooter

    app, _ = run_fleet(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        app.post_message(FleetPolled(app.source.snapshots[0]))
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause(0.3)
        runs = app.screen
        footer = runs.query_one(KeyFooter)

        def announce_then_switch() -> None:
            runs.set_focus(runs.query_one("#ckpt-table"))
            with footer._context():
                footer.bindings_changed(runs)  # the change announced, the recompose queued
            app.action_view("fleet")  # a view key handled before that recompose

        app.call_later(announce_then_switch)
        await pilot.pause(0.3)
        await pilot.press("2")
        await pilot.pause(0.3)
        assert app.screen is runs
        assert shown_footer(runs) == wanted_footer(runs)
        for view in "1232132":
            await pilot.press(view)
            await pilot.pause(0.05)
            assert shown_footer(app.screen) == wanted_footer(app.screen), view
